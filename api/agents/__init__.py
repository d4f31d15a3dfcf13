"""Amber's evidence tools for agents, whatever runs them.

- :mod:`api.agents.tools`: the seven tools (``fetch_evidence``, ``store_evidence``, ``cite``,
  ``resolve``, ``timemap``, ``timegate``, ``drift``) over the SDK, framework-neutral, and
  :func:`~api.agents.tools.explain`, what a model reads when one is refused.
- Thin adapters, each an optional extra: :mod:`api.agents.for_langchain`
  (``amber-archive[langchain]``, langchain-core tools), :mod:`api.agents.for_openai_agents`
  (``[openai-agents]``, function tools) and :mod:`api.agents.for_pydantic_ai`
  (``[pydantic-ai]``, a toolset). Each hands the model the same tools, and each refusal as
  that framework's way of telling the model a tool call failed, so the model can fix its
  quote or answer "I cannot cite this reliably.".
- The MCP server (:mod:`api.mcp`) exposes the same tools over MCP.
"""
