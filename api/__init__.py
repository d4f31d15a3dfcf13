"""Amber's HTTP edge: the FastAPI app (``api.app``), the client (``api.client``) and the CLI."""
