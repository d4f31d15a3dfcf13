"""``amber serve`` and ``amber keys``: running the API and managing who may call it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from api.cli.shared import load_settings, opened
from archive import __version__
from archive.access.keys import Role
from archive.archive import Archive
from archive.config import Settings
from archive.dates import to_rfc3339
from archive.exceptions import AmberError
from archive.index import DEFAULT_TENANT
from archive.workermetrics import empty as empty_metrics

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to bind.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=int,
    help="Worker processes (PostgreSQL only; SQLite wants one writer).",
)
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="Serve without API keys (every caller is admin+agent+auditor). Loopback only.",
)
def serve(host: str, port: int, workers: int, insecure_no_auth: bool) -> None:
    """Start the HTTP API.

    On the first start of the embedded default, an admin key is created and printed once.
    The first start records the public base URL of every URI-M in the index:
    AMBER_PUBLIC_BASE_URL, else this server's address (see `amber config set-base-url`).

    Example: amber serve --host 127.0.0.1 --port 8000
    """
    import gc

    import uvicorn

    from api.app import create_app

    settings = load_settings()
    if insecure_no_auth:
        if host not in LOOPBACK_HOSTS:
            raise click.ClickException(
                "--insecure-no-auth refuses to bind to anything but loopback"
            )
        if workers > 1:
            raise click.ClickException("--insecure-no-auth runs a single worker")
        click.secho(
            "WARNING: authentication is OFF (--insecure-no-auth): anyone who can reach "
            f"{host}:{port} can read and write everything.",
            fg="red",
            bold=True,
            err=True,
        )
    if workers > 1 and settings.resolved_database_url.startswith("sqlite"):
        raise click.ClickException("--workers > 1 needs PostgreSQL (AMBER_DATABASE_URL)")
    listening = _listening_url(host, port)
    # A wildcard address names no host a client could use: never record it as a base.
    fallback = None if host in WILDCARD_HOSTS else listening
    base_url = _prepare_index(settings, listening, fallback, first_key=not insecure_no_auth)
    settings = settings.with_overrides(public_base_url=base_url)
    click.echo(
        f"Amber {__version__} on {listening} (URI-Ms under {base_url}); "
        f"blobs {settings.resolved_blob_store}",
        err=True,
    )
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": "info",
        "access_log": False,
        "timeout_graceful_shutdown": 10,
    }
    if workers > 1:  # several processes need an import string; they read AMBER_* themselves
        import os

        os.environ["AMBER_PUBLIC_BASE_URL"] = str(settings.public_base_url)
        # One scrape answers for every worker (archive/workermetrics.py): they publish here.
        metrics_dir = Path(settings.metrics_dir or settings.data_dir / "metrics" / str(port))
        empty_metrics(metrics_dir)
        os.environ["AMBER_METRICS_DIR"] = str(metrics_dir.resolve())
        uvicorn.run("api.app:create_app", factory=True, workers=workers, **options)
    else:
        app = create_app(settings, auth=not insecure_no_auth)
        # What lives now (modules, the app, its schemas: ~170,000 objects) lives until exit:
        # out of the collector's sight, its full passes stop rescanning them (they took ~7%
        # of a busy server's CPU).
        gc.freeze()
        uvicorn.run(app, **options)


def _listening_url(host: str, port: int) -> str:
    shown_host = f"[{host}]" if ":" in host else host
    return f"http://{shown_host}:{port}"


def _prepare_index(
    settings: Settings, listening: str, fallback: str | None, *, first_key: bool
) -> str:
    """Settle the public base URL (recorded by the first server; archive/base_url.py) and,
    on the first start of the embedded default, make the first admin key. Returns the base."""
    archive = Archive.open(settings)
    try:
        settled = archive.settle_base_url(fallback)
        issued = None
        if first_key and settings.resolved_database_url.startswith("sqlite"):
            if not archive.keys.any_keys():
                issued = archive.keys.create(DEFAULT_TENANT, Role.ADMIN, name="first-start admin")
    except AmberError as error:
        raise click.ClickException(error.message) from None
    finally:
        archive.close()
    if settled.recorded_now:
        click.echo(f"Recorded {settled.url} as the base of every URI-M of this index.", err=True)
    elif settled.ignored_fallback is not None:
        click.secho(
            f"URI-Ms stay under {settled.url}, recorded when this index was first served, "
            f"although this server listens on {listening}. To move every URI-M: "
            f"amber config set-base-url URL",
            fg="yellow",
            err=True,
        )
    if issued is not None:
        click.secho(
            "First start: created an admin key for tenant 'default'. It is shown only "
            "this once; store it now:",
            fg="yellow",
            err=True,
        )
        click.echo(issued.key)
        click.echo(
            "Admin keys manage keys, holds and retention; they do not store evidence. "
            "Make a key for your agent with:  amber keys create --role agent",
            err=True,
        )
    return settled.url


@click.group()
def keys() -> None:
    """Manage API keys (sent as 'Authorization: Bearer <key>').

    Example: amber keys create --tenant acme --role agent --name "support bot"
    """


@keys.command("create")
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True, help="Tenant of the key.")
@click.option(
    "--role",
    type=click.Choice([r.value for r in Role]),
    required=True,
    help="agent writes and reads; auditor reads; admin manages keys and holds.",
)
@click.option("--name", default=None, help="A label to recognise the key by.")
def keys_create(tenant: str, role: str, name: str | None) -> None:
    """Create a key and print it once (only its HMAC is stored).

    Example: amber keys create --tenant acme --role auditor --name "Q3 audit"
    """
    with opened() as archive:
        issued = archive.keys.create(tenant, role, name)
    click.echo(
        f"key id {issued.info.key_id}, tenant {tenant}, role {role}. "
        "Store the key now; it is not shown again:",
        err=True,
    )
    click.echo(issued.key)


@keys.command("list")
@click.option("--tenant", default=None, help="Only this tenant's keys.")
def keys_list(tenant: str | None) -> None:
    """List keys (ids, tenants, roles; never secrets) as JSON lines.

    Example: amber keys list --tenant acme
    """
    with opened() as archive:
        for info in archive.keys.list(tenant):
            click.echo(
                json.dumps(
                    {
                        "key_id": info.key_id,
                        "tenant": info.tenant,
                        "role": info.role.value,
                        "name": info.name,
                        "created_at": to_rfc3339(info.created_at),
                        "revoked_at": to_rfc3339(info.revoked_at) if info.revoked_at else None,
                    }
                )
            )


@keys.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke a key; it stops working on the next request.

    Example: amber keys revoke 3f9a0c12be47
    """
    with opened() as archive:
        archive.keys.revoke(key_id)
    click.echo(f"revoked {key_id}")
