"""The ``amber`` command: thin wrappers over ``archive`` (parse, call, render)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from archive import __version__
from archive.archive import Archive, MementoRequest
from archive.config import Settings
from archive.dates import to_rfc3339
from archive.exceptions import AmberError
from archive.index import DEFAULT_TENANT
from archive.keys import Role
from archive.mementos import CaptureFacts, Memento


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except AmberError as error:
        raise click.ClickException(error.message) from None


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def _memento_summary(memento: Memento, base_url: str) -> dict[str, Any]:
    from api.urls import Urls

    urls = Urls(base_url)
    return {
        "id": memento.id,
        "uri_r": memento.uri_r,
        "uri_m": urls.memento(memento.id),
        "memento_datetime": to_rfc3339(memento.captured_at),
        "archived_at": to_rfc3339(memento.archived_at),
        "content_hash": memento.content_hash,
        "content_type": memento.media_type,
        "size": memento.size,
        "scope": memento.scope.value,
        "tool": memento.facts.tool,
        "final_url": memento.facts.final_url,
        "http_status": memento.facts.http_status,
    }


@contextmanager
def _opened() -> Iterator[Archive]:
    """The archive for one command; library errors become clean CLI errors."""
    archive = Archive.open(_settings())
    try:
        yield archive
    except AmberError as error:
        raise click.ClickException(error.message) from None
    finally:
        archive.close()


def _base_url(settings: Settings) -> str:
    return settings.public_base_url or "http://127.0.0.1:8000"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="amber")
def main() -> None:
    """Amber: a content-addressed archive of what AI agents cite (Memento, RFC 7089).

    Configuration comes from AMBER_* environment variables (see `amber config`). With none
    set, everything lives in ./amber-data (blobs + SQLite), no server to install.
    """


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to bind.")
@click.option("--workers", default=1, show_default=True, type=int,
              help="Worker processes (PostgreSQL only; SQLite wants one writer).")
@click.option("--insecure-no-auth", is_flag=True,
              help="Serve without API keys (every caller is admin+agent+auditor). Loopback only.")
def serve(host: str, port: int, workers: int, insecure_no_auth: bool) -> None:
    """Start the HTTP API.

    On the first start of the embedded default, an admin key is created and printed once.

    Example: amber serve --host 127.0.0.1 --port 8000
    """
    import uvicorn

    from api.app import create_app

    settings = _settings()
    if settings.public_base_url is None:
        shown_host = f"[{host}]" if ":" in host else host
        settings = settings.with_overrides(public_base_url=f"http://{shown_host}:{port}")
    if insecure_no_auth:
        if host not in LOOPBACK_HOSTS:
            raise click.ClickException("--insecure-no-auth refuses to bind to anything but loopback")
        if workers > 1:
            raise click.ClickException("--insecure-no-auth runs a single worker")
        click.secho("WARNING: authentication is OFF (--insecure-no-auth): anyone who can reach "
                    f"{host}:{port} can read and write everything.", fg="red", bold=True, err=True)
    if workers > 1 and settings.resolved_database_url.startswith("sqlite"):
        raise click.ClickException("--workers > 1 needs PostgreSQL (AMBER_DATABASE_URL)")
    if not insecure_no_auth:
        _first_start_admin_key(settings)
    click.echo(f"Amber {__version__} on http://{host}:{port} (URI-Ms under "
               f"{settings.public_base_url}); blobs {settings.resolved_blob_store}", err=True)
    options: dict[str, Any] = {"host": host, "port": port, "log_level": "info",
                               "access_log": False, "timeout_graceful_shutdown": 10}
    if workers > 1:  # several processes need an import string; they read AMBER_* themselves
        import os

        os.environ["AMBER_PUBLIC_BASE_URL"] = str(settings.public_base_url)
        uvicorn.run("api.app:create_app", factory=True, workers=workers, **options)
    else:
        uvicorn.run(create_app(settings, auth=not insecure_no_auth), **options)


def _first_start_admin_key(settings: Settings) -> None:
    """On an embedded default with no keys yet, make the first admin key (printed once)."""
    if not settings.resolved_database_url.startswith("sqlite"):
        return
    archive = Archive.open(settings)
    try:
        if archive.keys.any_keys():
            return
        issued = archive.keys.create(DEFAULT_TENANT, Role.ADMIN, name="first-start admin")
    finally:
        archive.close()
    click.secho("First start: created an admin key for tenant 'default'. It is shown only "
                "this once; store it now:", fg="yellow", err=True)
    click.echo(issued.key)
    click.echo("Create agent/auditor keys with: amber keys create --role agent", err=True)


@main.group()
def keys() -> None:
    """Manage API keys (sent as 'Authorization: Bearer <key>').

    Example: amber keys create --tenant acme --role agent --name "support bot"
    """


@keys.command("create")
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True, help="Tenant of the key.")
@click.option("--role", type=click.Choice([r.value for r in Role]), required=True,
              help="agent writes and reads; auditor reads; admin manages keys and holds.")
@click.option("--name", default=None, help="A label to recognise the key by.")
def keys_create(tenant: str, role: str, name: str | None) -> None:
    """Create a key and print it once (only its HMAC is stored).

    Example: amber keys create --tenant acme --role auditor --name "Q3 audit"
    """
    with _opened() as archive:
        issued = archive.keys.create(tenant, role, name)
    click.echo(f"key id {issued.info.key_id}, tenant {tenant}, role {role}. "
               "Store the key now; it is not shown again:", err=True)
    click.echo(issued.key)


@keys.command("list")
@click.option("--tenant", default=None, help="Only this tenant's keys.")
def keys_list(tenant: str | None) -> None:
    """List keys (ids, tenants, roles; never secrets) as JSON lines.

    Example: amber keys list --tenant acme
    """
    with _opened() as archive:
        for info in archive.keys.list(tenant):
            click.echo(json.dumps({
                "key_id": info.key_id, "tenant": info.tenant, "role": info.role.value,
                "name": info.name, "created_at": to_rfc3339(info.created_at),
                "revoked_at": to_rfc3339(info.revoked_at) if info.revoked_at else None,
            }))


@keys.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke a key; it stops working on the next request.

    Example: amber keys revoke 3f9a0c12be47
    """
    with _opened() as archive:
        archive.keys.revoke(key_id)
    click.echo(f"revoked {key_id}")


@main.command()
@click.argument("url")
@click.option("--tool", default="amber.capture", show_default=True, help="Recorded capturing tool.")
@click.option("--json", "as_json", is_flag=True, help="Print the memento as JSON.")
def capture(url: str, tool: str, as_json: bool) -> None:
    """Fetch URL (through the fetch guard) and store it as a document memento.

    Prints the URI-M.  Example: amber capture https://example.org/
    """
    from archive.fetch import fetch

    settings = _settings()
    archive = Archive.open(settings)
    try:
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
    summary = _memento_summary(result.memento, _base_url(settings))
    if as_json:
        _echo_json(summary)
    else:
        click.echo(summary["uri_m"])


@main.command()
@click.argument("url")
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True)
def timemap(url: str, tenant: str) -> None:
    """List every memento of URL (its TimeMap), oldest first, as JSON lines.

    Example: amber timemap 'https://example.org/a?b=1'
    """
    settings = _settings()
    archive = Archive.open(settings)
    try:
        page = 1
        while True:
            found = archive.timemap(tenant, url, page)
            for memento in found.mementos:
                click.echo(json.dumps(_memento_summary(memento, _base_url(settings))))
            if page >= found.pages:
                break
            page += 1
    except AmberError as error:
        raise click.ClickException(error.message) from None
    finally:
        archive.close()


@main.command()
@click.argument("memento_id")
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True)
@click.option("--content", is_flag=True, help="Write the verified bytes to stdout instead.")
def show(memento_id: str, tenant: str, content: bool) -> None:
    """Show one memento's metadata (or, with --content, its verified bytes).

    Example: amber show 3f2a…  (the id from a URI-M or `amber timemap`)
    """
    settings = _settings()
    archive = Archive.open(settings)
    try:
        memento = archive.get_memento(tenant, memento_id)
        if content:
            sys.stdout.buffer.write(archive.read_content(memento))
            return
        _echo_json(_memento_summary(memento, _base_url(settings)))
    except AmberError as error:
        raise click.ClickException(error.message) from None
    finally:
        archive.close()


@main.command()
def verify() -> None:
    """Re-hash every memento's blob; exit 1 if any is missing or corrupt.

    Example: amber verify
    """
    settings = _settings()
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


@main.command("config")
def show_config() -> None:
    """Print the effective configuration (secrets masked).

    Example: AMBER_DATA_DIR=/srv/amber amber config
    """
    _echo_json(_settings().describe())


if __name__ == "__main__":
    main()
