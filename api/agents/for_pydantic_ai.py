"""Amber's evidence tools as a Pydantic AI toolset (``amber-archive[pydantic-ai]``).

::

    async with AsyncAmberClient(url, key) as amber:
        agent = Agent(model, toolsets=[amber_toolset(EvidenceTools(amber, settings, 20_000))])
        result = await agent.run("How long is parental leave?")

A refusal is a :class:`~pydantic_ai.ModelRetry`: the model reads why and may call again
(up to ``max_retries`` times per tool) or answer without the claim.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import ModelRetry, Tool
from pydantic_ai.toolsets import FunctionToolset

from api.agents.tools import DESCRIPTIONS, EvidenceTools


def amber_toolset(tools: EvidenceTools, max_retries: int = 3) -> FunctionToolset[Any]:
    """The seven evidence tools, as one toolset."""
    return FunctionToolset(
        [
            Tool(
                function,
                takes_ctx=False,
                name=function.__name__,
                description=DESCRIPTIONS[function.__name__],
                max_retries=max_retries,
            )
            for function in tools.functions(ModelRetry)
        ]
    )
