"""Amber's evidence tools as OpenAI Agents SDK function tools (``amber-archive[openai-agents]``).

::

    async with AsyncAmberClient(url, key) as amber:
        agent = Agent(name="researcher", tools=amber_tools(EvidenceTools(amber, settings, 20_000)))
        result = await Runner.run(agent, "How long is parental leave?")

A refusal becomes the tool's answer to the model (the SDK's ``failure_error_function``),
so the run carries on and the model can fix its quote or degrade its answer.
"""

from __future__ import annotations

from typing import Any

from agents import FunctionTool, RunContextWrapper, function_tool

from api.agents.tools import DESCRIPTIONS, EvidenceTools


class Refused(Exception):
    """A refused tool call; its message is what the model reads."""


def _refusal(_ctx: RunContextWrapper[Any], error: Exception) -> str:
    if isinstance(error, Refused):
        return str(error)
    raise error  # not a refusal: a bug, surfaced to the caller


def amber_tools(tools: EvidenceTools) -> list[FunctionTool]:
    """The seven evidence tools, as function tools."""
    return [
        function_tool(
            function,
            name_override=function.__name__,
            description_override=DESCRIPTIONS[function.__name__],
            failure_error_function=_refusal,
            # Optional arguments (captured_at, run_id, a quote's prefix) stay optional.
            strict_mode=False,
        )
        for function in tools.functions(Refused)
    ]
