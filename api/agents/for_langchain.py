"""Amber's evidence tools as LangChain tools (``amber-archive[langchain]``).

::

    async with AsyncAmberClient(url, key) as amber:
        tools = amber_tools(EvidenceTools(amber, Settings.from_env(), 20_000))
        model = chat_model.bind_tools(tools)   # or any LangChain / LangGraph agent

A refusal is a :class:`~langchain_core.tools.ToolException`, which the tools hand back to
the model as the tool's answer (``handle_tool_error``), so the agent loop carries on.
"""

from __future__ import annotations

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from api.agents.tools import DESCRIPTIONS, EvidenceTools


def amber_tools(tools: EvidenceTools) -> list[BaseTool]:
    """The seven evidence tools, as LangChain structured tools (async: use ``ainvoke``)."""
    return [
        StructuredTool.from_function(
            coroutine=function,
            name=function.__name__,
            description=DESCRIPTIONS[function.__name__],
            handle_tool_error=True,
        )
        for function in tools.functions(ToolException)
    ]
