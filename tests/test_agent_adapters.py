"""The framework adapters (api/agents/for_*.py), each inside its framework's own agent loop
with a scripted model (no model service is reachable here): a citation accepted, then a
made-up quote refused — the model reads the refusal, nothing is stored, and it degrades
its answer.

LangChain: langchain-core has tools and chat models, not an agent loop; the loop here is
langchain-core's tool calling (``ainvoke`` a tool with the model's ``ToolCall``, get a
``ToolMessage``), as a LangGraph agent runs it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from api.agents.tools import TOOL_NAMES, EvidenceTools
from api.app import create_app
from api.client import AsyncAmberClient
from archive.config import Settings

SAFE = "I cannot cite this reliably."
PAGE = "<p>Parental leave is sixteen weeks, fully paid.</p>"


def run_with_tools(tmp_path: Path, loop: Callable[[EvidenceTools, str], Any]) -> None:
    """Runs ``loop(tools, memento_id)`` against an in-process Amber, then checks that only
    the accepted citation was stored."""

    async def main() -> None:
        settings = Settings(data_dir=tmp_path / "amber-data")
        app = create_app(settings, auth=False)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with AsyncAmberClient(app.state.urls.base, transport=transport) as amber:
                tools = EvidenceTools(amber, settings, 1000)
                page = await tools.store_evidence(
                    "kb://policies/leave", PAGE, "text/html", "kb.read"
                )
                await loop(tools, page["memento_id"])
                held = await tools.read_transcript("conv-1")
                [stored] = held["citations"]
                assert stored["document_uri_m"] == page["uri_m"]

    anyio.run(main)


def cite_args(memento_id: str, exact: str) -> dict[str, Any]:
    return {
        "transcript_id": "conv-1",
        "citations": [{"memento_id": memento_id, "quote": {"exact": exact}}],
    }


# -- LangChain ---------------------------------------------------------------------------


def test_langchain_tools_accept_a_citation_and_hand_the_model_a_refusal(tmp_path: Path) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

    from api.agents.for_langchain import amber_tools

    async def loop(tools: EvidenceTools, memento_id: str) -> None:
        lc_tools = {t.name: t for t in amber_tools(tools)}
        assert sorted(lc_tools) == sorted(TOOL_NAMES)
        cite_schema = lc_tools["cite"].tool_call_schema.model_json_schema()
        assert cite_schema["required"] == ["transcript_id", "citations"]
        script = iter(
            [
                AIMessage("", tool_calls=[_call("cite", cite_args(memento_id, "sixteen weeks"))]),
                AIMessage("", tool_calls=[_call("cite", cite_args(memento_id, "ten weeks"))]),
                AIMessage(SAFE),
            ]
        )
        model = GenericFakeChatModel(messages=script)
        history: list[BaseMessage] = [HumanMessage("How long is parental leave?")]
        while True:
            reply = await model.ainvoke(history)
            history.append(reply)
            assert isinstance(reply, AIMessage)
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:
                history.append(await lc_tools[call["name"]].ainvoke(call))
        accepted, refused = [m for m in history if isinstance(m, ToolMessage)]
        assert accepted.status == "success" and "citation_id" in str(accepted.content)
        assert refused.status == "error"
        assert "quote_not_found" in str(refused.content) and SAFE in str(refused.content)
        assert history[-1].content == SAFE

    run_with_tools(tmp_path, loop)


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"call-{name}-{len(json.dumps(args))}"}


# -- OpenAI Agents SDK --------------------------------------------------------------------


def test_openai_agents_tools_accept_a_citation_and_hand_the_model_a_refusal(
    tmp_path: Path,
) -> None:
    from agents import Agent, Runner, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from api.agents.for_openai_agents import amber_tools

    set_tracing_disabled(True)  # tracing would export to OpenAI
    seen: list[str] = []

    class Scripted(Model):
        def __init__(self, memento_id: str) -> None:
            self.steps = iter(
                [
                    ("cite", cite_args(memento_id, "sixteen weeks")),
                    ("cite", cite_args(memento_id, "ten weeks")),
                    None,
                ]
            )

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            items = args[1] if len(args) > 1 else kwargs["input"]
            outputs = [
                i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
            ]
            seen[:] = [str(o["output"]) for o in outputs]
            step = next(self.steps)
            if step is None:
                text = ResponseOutputText(text=SAFE, type="output_text", annotations=[])
                item: Any = ResponseOutputMessage(
                    id="m", content=[text], role="assistant", status="completed", type="message"
                )
            else:
                name, arguments = step
                item = ResponseFunctionToolCall(
                    id=f"fc{len(seen)}",
                    call_id=f"call{len(seen)}",
                    name=name,
                    arguments=json.dumps(arguments),
                    type="function_call",
                )
            return ModelResponse(output=[item], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise AssertionError("Runner.run does not stream")

    async def loop(tools: EvidenceTools, memento_id: str) -> None:
        oa_tools = amber_tools(tools)
        assert sorted(t.name for t in oa_tools) == sorted(TOOL_NAMES)
        agent = Agent(name="researcher", tools=list(oa_tools), model=Scripted(memento_id))
        result = await Runner.run(agent, "How long is parental leave?")
        assert result.final_output == SAFE
        accepted, refused = seen
        assert "citation_id" in accepted
        assert "quote_not_found" in refused and SAFE in refused

    run_with_tools(tmp_path, loop)


# -- Pydantic AI ----------------------------------------------------------------------------


def test_pydantic_ai_toolset_accepts_a_citation_and_hands_the_model_a_refusal(
    tmp_path: Path,
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from api.agents.for_pydantic_ai import amber_toolset

    async def loop(tools: EvidenceTools, memento_id: str) -> None:
        steps = iter(
            [
                ("cite", cite_args(memento_id, "sixteen weeks")),
                ("cite", cite_args(memento_id, "ten weeks")),
                None,
            ]
        )

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            assert sorted(t.name for t in info.function_tools) == sorted(TOOL_NAMES)
            step = next(steps)
            if step is None:
                return ModelResponse(parts=[TextPart(SAFE)])
            return ModelResponse(parts=[ToolCallPart(step[0], step[1])])

        agent = Agent(FunctionModel(model), toolsets=[amber_toolset(tools)])
        result = await agent.run("How long is parental leave?")
        assert result.output == SAFE
        parts = [p for m in result.all_messages() if isinstance(m, ModelRequest) for p in m.parts]
        accepted, refused = [p for p in parts if isinstance(p, ToolReturnPart)]
        assert accepted.outcome == "success"
        assert accepted.content["citations"][0]["citation_id"]
        assert refused.outcome == "retried"  # ModelRetry: the model reads why and may retry
        assert "quote_not_found" in str(refused.content) and SAFE in str(refused.content)

    run_with_tools(tmp_path, loop)


@pytest.mark.parametrize("module", ["for_langchain", "for_openai_agents", "for_pydantic_ai"])
def test_each_adapter_stays_thin(module: str) -> None:
    # Past ~100 lines an adapter is doing the SDK's work: add it to api/agents/tools.py.
    source = Path(__file__).resolve().parents[1] / "api" / "agents" / f"{module}.py"
    assert len(source.read_text().splitlines()) <= 100


def test_what_the_model_reads_for_each_kind_of_failure() -> None:
    from api.agents.tools import explain
    from api.client import AmberConnectionError, CitationError, CitationRejected, NotFoundError
    from archive.exceptions import FetchRefused

    rejected = CitationRejected(
        "rejected",
        [CitationError(1, "disallowed_tool", "search results are not evidence")],
    )
    message = explain(rejected)
    assert message is not None
    assert "citation 1: disallowed_tool" in message and "fetch_evidence the page" in message
    assert SAFE in message
    assert explain(NotFoundError("no memento", status=404)) == (
        "Not found: no memento. Use only ids and URLs Amber returned to you."
    )
    unreachable = explain(AmberConnectionError("connection refused"))
    assert unreachable is not None and "nothing was stored" in unreachable
    refused_fetch = explain(FetchRefused("refused to fetch '10.0.0.1' port 80: private"))
    assert refused_fetch == "Refused (fetch_refused): refused to fetch '10.0.0.1' port 80: private"
    assert explain(KeyError("a bug")) is None  # not a refusal: it surfaces as a crash
