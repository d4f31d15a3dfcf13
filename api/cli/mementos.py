"""Mementos from the command line: capture a URL, list a TimeMap, show or verify what is
stored, and print the configuration."""

from __future__ import annotations

import json
import sys

import click

from api.cli.shared import echo_json, load_settings, memento_summary, minted_base_url, opened
from archive.archive import Archive
from archive.exceptions import AmberError
from archive.index import DEFAULT_TENANT
from archive.mementos import CaptureFacts
from archive.writes import MementoRequest


@click.command()
@click.argument("url")
@click.option("--tool", default="amber.capture", show_default=True, help="Recorded capturing tool.")
@click.option("--json", "as_json", is_flag=True, help="Print the memento as JSON.")
def capture(url: str, tool: str, as_json: bool) -> None:
    """Fetch URL (through the fetch guard) and store it as a document memento.

    Prints the URI-M.  Example: amber capture https://example.org/
    """
    from archive.fetch import fetch

    settings = load_settings()
    archive = Archive.open(settings)
    try:
        base_url = minted_base_url(archive)  # refuse a mismatched base before storing
        document = fetch(url, settings)
        result = archive.write_memento(
            MementoRequest(
                uri_r=url,
                content=document.body,
                content_type=document.content_type or "application/octet-stream",
                captured_at=document.fetched_at,
                facts=CaptureFacts(
                    tool=tool,
                    final_url=document.final_url,
                    http_status=document.status,
                    headers=dict(document.headers),
                ),
            )
        )
    except AmberError as error:
        raise click.ClickException(error.message) from None
    finally:
        archive.close()
    summary = memento_summary(result.memento, base_url)
    if as_json:
        echo_json(summary)
    else:
        click.echo(summary["uri_m"])


@click.command()
@click.argument("url")
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True)
def timemap(url: str, tenant: str) -> None:
    """List every memento of URL (its TimeMap), oldest first, as JSON lines.

    Example: amber timemap 'https://example.org/a?b=1'
    """
    settings = load_settings()
    archive = Archive.open(settings)
    try:
        base_url = minted_base_url(archive)
        page = 1
        while True:
            found = archive.timemap(tenant, url, page)
            for memento in found.mementos:
                click.echo(json.dumps(memento_summary(memento, base_url)))
            if page >= found.pages:
                break
            page += 1
    except AmberError as error:
        raise click.ClickException(error.message) from None
    finally:
        archive.close()


@click.command()
@click.argument("memento_id")
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True)
@click.option("--content", is_flag=True, help="Write the verified bytes to stdout instead.")
def show(memento_id: str, tenant: str, content: bool) -> None:
    """Show one memento's metadata (or, with --content, its verified bytes).

    Example: amber show 3f2a…  (the id from a URI-M or `amber timemap`)
    """
    settings = load_settings()
    archive = Archive.open(settings)
    try:
        memento = archive.get_memento(tenant, memento_id)
        if content:
            sys.stdout.buffer.write(archive.read_content(memento))
            return
        echo_json(memento_summary(memento, minted_base_url(archive)))
    except AmberError as error:
        raise click.ClickException(error.message) from None
    finally:
        archive.close()


@click.command()
def verify() -> None:
    """Re-hash every live memento's blob; exit 1 if any is missing or corrupt.

    Deleted mementos (expired or erased) are not checked: their bytes are gone on purpose.

    Example: amber verify
    """
    settings = load_settings()
    archive = Archive.open(settings)
    bad = 0
    try:
        entries = archive.index.all_memento_blobs()
        for memento_id, address, version_id in entries:
            try:
                archive.blobs.get(address, version_id)
            except AmberError as error:
                bad += 1
                click.echo(f"{memento_id} {address}: {error.code}", err=True)
    finally:
        archive.close()
    click.echo(f"{len(entries)} mementos checked, {bad} failed")
    if bad:
        raise SystemExit(1)


@click.group("config", invoke_without_command=True)
@click.pass_context
def show_config(context: click.Context) -> None:
    """Print the effective configuration (secrets masked).

    Example: AMBER_DATA_DIR=/srv/amber amber config
    """
    if context.invoked_subcommand is None:
        echo_json(load_settings().describe())


@show_config.command("set-base-url")
@click.argument("url")
def set_base_url(url: str) -> None:
    """Record URL as the public base of every URI-M of this index, old and new.

    URI-Ms are permanent identifiers: the first server records its base and every process
    (servers, CLI, jobs) uses it. Move it only when the old base will keep answering (a
    redirect) or nothing was handed out yet, then restart every server and set
    AMBER_PUBLIC_BASE_URL to URL (or unset it) where it is set.

    Example: amber config set-base-url https://amber.example.org
    """
    with opened() as archive:
        old, new = archive.move_base_url(url)
    if old == new:
        click.echo(f"URI-Ms stay under {new}")
    else:
        click.echo(f"URI-Ms now under {new} (were under {old or 'nothing recorded'})")
