"""``amber erase``: delete evidence now, from the command line, as an admin does over HTTP
(``POST /api/v1/mementos/{id}/erase``): the library's erasure, with a reason recorded in
the admin log; refused, changing nothing, while a legal hold reaches the memento."""

from __future__ import annotations

import getpass

import click

from api.cli.shared import echo_json, opened
from archive.exceptions import RetentionConflict
from archive.index import DEFAULT_TENANT


def _actor() -> str:
    """Who erased, for the admin log: the operating-system user running the command."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        return "cli"


@click.command("erase")
@click.argument("memento_id")
@click.option(
    "--reason",
    required=True,
    help="Why (takedown, court order, data-protection request); kept in the admin log.",
)
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print what was erased as JSON.")
def erase(memento_id: str, reason: str, tenant: str, as_json: bool) -> None:
    """Erase MEMENTO_ID now, with the passages cut from it and the text derived from it.

    Refused while a legal hold reaches it. Example:
    amber erase 3f2a… --reason "court order 2026-114"
    """
    with opened() as archive:
        try:
            erasure = archive.retention.erase(tenant, memento_id, reason, _actor())
        except RetentionConflict as error:
            raise click.ClickException(f"not erased: {error.message}") from None
    if as_json:
        echo_json(erasure.as_json())
        return
    click.echo(
        f"erased {len(erasure.erased_ids)} memento(s) ({', '.join(erasure.erased_ids)}), "
        f"{erasure.blobs_deleted} blob(s); admin log {erasure.admin_log_id}"
    )
    if not erasure.scrubbed:
        click.echo(
            "the index's WAL was kept by a reader: the next complete checkpoint empties it",
            err=True,
        )
