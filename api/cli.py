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
    """The API's view of a memento (api.mementos.memento_json), capture facts flattened and
    the capture headers and Memento links left out."""
    from api.mementos import memento_json
    from api.urls import Urls

    shown = memento_json(memento, Urls(base_url))
    capture = shown.pop("capture")
    for link in ("timegate", "timemap", "timemap_json"):
        del shown[link]
    return {
        **shown,
        "tool": capture["tool"],
        "final_url": capture["final_url"],
        "http_status": capture["http_status"],
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

    Example: amber serve --host 127.0.0.1 --port 8000
    """
    import gc

    import uvicorn

    from api.app import create_app

    settings = _settings()
    if settings.public_base_url is None:
        shown_host = f"[{host}]" if ":" in host else host
        settings = settings.with_overrides(public_base_url=f"http://{shown_host}:{port}")
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
    if not insecure_no_auth:
        _first_start_admin_key(settings)
    click.echo(
        f"Amber {__version__} on http://{host}:{port} (URI-Ms under "
        f"{settings.public_base_url}); blobs {settings.resolved_blob_store}",
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
        uvicorn.run("api.app:create_app", factory=True, workers=workers, **options)
    else:
        app = create_app(settings, auth=not insecure_no_auth)
        # What lives now (modules, the app, its schemas: ~170,000 objects) lives until exit:
        # out of the collector's sight, its full passes stop rescanning them (they took ~7%
        # of a busy server's CPU).
        gc.freeze()
        uvicorn.run(app, **options)


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
    click.secho(
        "First start: created an admin key for tenant 'default'. It is shown only "
        "this once; store it now:",
        fg="yellow",
        err=True,
    )
    click.echo(issued.key)
    click.echo("Create agent/auditor keys with: amber keys create --role agent", err=True)


@main.group()
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
    with _opened() as archive:
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
    with _opened() as archive:
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
    with _opened() as archive:
        archive.keys.revoke(key_id)
    click.echo(f"revoked {key_id}")


@main.group()
def retention() -> None:
    """Retention jobs: delete what expired, report what is kept and what it costs.

    Example: amber retention sweep --dry-run
    """


@retention.command("sweep")
@click.option("--dry-run", is_flag=True, help="Report what would be deleted; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1, 100_000))
def retention_sweep(dry_run: bool, as_json: bool, batch_size: int) -> None:
    """Delete expired mementos (tombstones stay) and the blobs nothing else uses.

    Safe to kill at any point and rerun. Example: amber retention sweep --batch-size 1000
    """
    with _opened() as archive:
        show = sys.stderr.isatty() and not as_json

        def progress(report: Any) -> None:
            if show:
                click.echo(
                    f"\r{report.evaluated} evaluated, {report.mementos_deleted} expired, "
                    f"{report.held} held",
                    nl=False,
                    err=True,
                )

        report = archive.retention.sweep(batch_size=batch_size, dry_run=dry_run, progress=progress)
        if show:
            click.echo(err=True)
    summary = report.as_dict()
    if as_json:
        _echo_json(summary)
        return
    for key, value in summary.items():
        click.echo(f"{key:>18}: {value}")


@retention.command("report")
def retention_report() -> None:
    """Bytes kept per policy and per label, and what expires when (JSON).

    Example: amber retention report > retention.json
    """
    with _opened() as archive:
        _echo_json(archive.retention.report())


@main.command("gc")
@click.option("--safety-age-minutes", default=60, show_default=True, type=click.IntRange(1))
@click.option("--dry-run", is_flag=True)
def gc(safety_age_minutes: int, dry_run: bool) -> None:
    """Delete orphan blobs (from writes that crashed before their index commit) and the
    local store's leftover temp files (from writes that crashed before publishing).

    Only what is older than the safety age, so in-flight writes are never touched.
    Example: amber gc --safety-age-minutes 120
    """
    from datetime import timedelta

    safety_age = timedelta(minutes=safety_age_minutes)
    with _opened() as archive:
        collected = archive.retention.collect_orphans(safety_age=safety_age, dry_run=dry_run)
        temp_files = archive.retention.collect_temp_files(safety_age=safety_age, dry_run=dry_run)
    verb = "would be deleted" if dry_run else "deleted"
    click.echo(f"{len(collected)} orphan blob(s) {verb}")
    click.echo(f"{len(temp_files)} leftover temp file(s) {verb}")


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


@main.group()
def drift() -> None:
    """Drift jobs: re-check cited passages against the live web; drift rates per site.

    Example: amber drift run --limit 500 --json > checks.jsonl
    """


@drift.command("run")
@click.option(
    "--limit", default=None, type=click.IntRange(0), help="Check at most N due citations."
)
@click.option(
    "--concurrency",
    default=None,
    type=click.IntRange(1),
    help="Fetches in flight (default: [drift] concurrency).",
)
@click.option("--tenant", default=None, help="Only this tenant's citations (default: all).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per checked citation.")
def drift_run(
    limit: int | None, concurrency: int | None, tenant: str | None, as_json: bool
) -> None:
    """Check the citations that are due and store one verdict per citation.

    Verdicts: identical, cosmetic, material, reversal, gone, soft_404, unreachable.
    Safe to kill and rerun. Example: amber drift run --limit 1000 --concurrency 32 --json
    """
    with _opened() as archive:
        bar: Any = None

        def planned(total: int) -> None:
            nonlocal bar
            if not as_json:
                bar = click.progressbar(length=total, label="checking", file=sys.stderr)
                bar.__enter__()

        def checked(record: Any) -> None:
            if as_json:
                click.echo(json.dumps(record.as_json(), ensure_ascii=False))
            elif bar is not None:
                bar.update(1)

        try:
            summary = archive.drift.job().run_summary(
                limit, concurrency, tenant=tenant, on_plan=planned, on_check=checked
            )
        finally:
            if bar is not None:
                bar.__exit__(None, None, None)
    if summary.not_checkable:
        click.echo(
            f"{summary.not_checkable} citation(s) not checkable (URI-R not http/https)", err=True
        )
    if summary.failed:
        click.echo(
            f"{summary.failed} citation(s) failed unexpectedly (see the log); still due", err=True
        )
    if as_json:
        return
    click.echo(f"{len(summary.checks)} citation(s) checked, {summary.uri_rs} URI-R(s) fetched")
    for verdict, count in summary.counts().items():
        click.echo(f"{verdict:>12}  {count}")
    flagged = sum(1 for c in summary.checks if c.flagged)
    if flagged:
        click.echo(f"{flagged} check(s) set needs_review on their transcript")


@drift.command("report")
@click.option(
    "--window-days",
    default=None,
    type=click.IntRange(1),
    help="Window in days (default: [drift] window_days).",
)
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def drift_report(window_days: int | None, tenant: str, as_json: bool) -> None:
    """Drift rates per source host: of the citations checked in the window, how many had
    eroded (material, reversal, gone, soft_404) at their latest check.

    Example: amber drift report --window-days 30
    """
    with _opened() as archive:
        window = window_days or archive.settings.drift.window_days
        rates = archive.drift.source_rates(tenant, window_days=window)
    if as_json:
        _echo_json(
            {
                "window_days": window,
                "sources": [
                    {
                        "host": r.host,
                        "citations_checked": r.checked,
                        "eroded": r.eroded,
                        "rate": round(r.rate, 4),
                        "verdicts": r.verdicts,
                    }
                    for r in rates
                ],
            }
        )
        return
    click.echo(f"{'host':<40} {'checked':>8} {'eroded':>7} {'rate':>7}")
    for r in rates:
        click.echo(f"{r.host[:40]:<40} {r.checked:>8} {r.eroded:>7} {r.rate:>7.1%}")


@main.command("config")
def show_config() -> None:
    """Print the effective configuration (secrets masked).

    Example: AMBER_DATA_DIR=/srv/amber amber config
    """
    _echo_json(_settings().describe())


if __name__ == "__main__":
    main()
