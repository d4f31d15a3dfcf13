"""Amber: a content-addressed snapshot archive speaking the Memento protocol (RFC 7089).

The library does all the work; ``api`` (HTTP) and the CLI only parse, call and render.
Start from :class:`archive.archive.Archive`, built from :class:`archive.config.Settings`.
"""

__version__ = "0.1.0"
