"""Amber's MCP server (the official ``mcp`` SDK), over the evidence tools of
:mod:`api.agents.tools`.

- :mod:`api.mcp.server`: the server: seven tools, the resources ``amber://mementos/{id}``
  and ``amber://transcripts/{id}``, the prompt ``cite-with-evidence``; refusals as tool
  errors.
- :mod:`api.mcp.http`: ``/mcp`` on ``amber serve`` (Streamable HTTP, Amber's Bearer keys).
- ``amber mcp`` (:mod:`api.cli.mcp`) serves it over stdio.
"""
