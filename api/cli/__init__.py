"""The ``amber`` command: thin wrappers over ``archive`` (parse, call, render).

One module per family of commands: ``server`` (serve, keys), ``mementos`` (capture,
timemap, show, verify, config) and ``jobs`` (retention, gc, drift), ``erasure`` (erase), ``mcp`` (the MCP server over stdio); ``shared`` holds what
they all use.
"""

from __future__ import annotations

import click

from api.cli import bundles, erasure, evidence, jobs, mcp, mementos, server
from archive import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="amber")
def main() -> None:
    """Amber: a content-addressed archive of what AI agents cite (Memento, RFC 7089).

    Configuration comes from AMBER_* environment variables (see `amber config`). With none
    set, everything lives in ./amber-data (blobs + SQLite), no server to install.
    """


for command in (
    server.serve,
    server.keys,
    jobs.retention,
    jobs.gc,
    mementos.capture,
    mementos.timemap,
    mementos.show,
    mementos.verify,
    jobs.drift,
    mementos.show_config,
    evidence.log_group,
    evidence.proof_group,
    mcp.mcp,
    bundles.export,
    bundles.verify_bundle,
    bundles.import_archive,
    erasure.erase,
):
    main.add_command(command)
