"""The batch jobs: ``amber retention``, ``amber gc`` and ``amber drift``. Each is safe to kill
at any point and rerun."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from api.cli.shared import echo_json, opened
from archive.index import DEFAULT_TENANT

if TYPE_CHECKING:
    from archive.drift import CheckRecord
    from archive.retention import SweepReport


@click.group()
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
    with opened() as archive:
        show = sys.stderr.isatty() and not as_json

        def progress(report: SweepReport) -> None:
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
        echo_json(summary)
        return
    for key, value in summary.items():
        click.echo(f"{key:>18}: {value}")


@retention.command("report")
def retention_report() -> None:
    """Bytes kept per policy and per label, what expires when, and expired evidence the
    store keeps until its Object Lock allows the deletion ("waiting_on_lock": blobs, bytes,
    earliest and latest lock date) (JSON).

    Example: amber retention report > retention.json
    """
    with opened() as archive:
        echo_json(archive.retention.report())


@click.command("gc")
@click.option("--safety-age-minutes", default=60, show_default=True, type=click.IntRange(1))
@click.option("--dry-run", is_flag=True)
def gc(safety_age_minutes: int, dry_run: bool) -> None:
    """Delete orphan blobs (from writes that crashed before their index commit), the
    local store's leftover temp files (from writes that crashed before publishing) and
    Idempotency-Key answers past AMBER_IDEMPOTENCY_TTL_HOURS.

    Only what is older than the safety age, so in-flight writes are never touched.
    Example: amber gc --safety-age-minutes 120
    """
    from datetime import timedelta

    safety_age = timedelta(minutes=safety_age_minutes)
    with opened() as archive:
        collected = archive.retention.collect_orphans(safety_age=safety_age, dry_run=dry_run)
        temp_files = archive.retention.collect_temp_files(safety_age=safety_age, dry_run=dry_run)
        answers = archive.retention.forget_idempotency_answers(dry_run=dry_run)
        locked = archive.retention.waiting_on_lock()
    verb = "would be deleted" if dry_run else "deleted"
    click.echo(f"{len(collected)} orphan blob(s) {verb}")
    click.echo(f"{len(temp_files)} leftover temp file(s) {verb}")
    click.echo(f"{answers} expired idempotency answer(s) {verb}")
    if locked["blobs"]:
        click.echo(
            f"{locked['blobs']} expired blob(s) ({locked['bytes']} bytes) wait on their Object "
            f"Lock until {locked['latest']}; a sweep deletes each once its lock allows"
        )


@click.group()
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
    with opened() as archive:
        bar: Any = None

        def planned(total: int) -> None:
            nonlocal bar
            if not as_json:
                bar = click.progressbar(length=total, label="checking", file=sys.stderr)
                bar.__enter__()

        def checked(record: CheckRecord) -> None:
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
    with opened() as archive:
        window = window_days or archive.settings.drift.window_days
        rates = archive.drift.source_rates(tenant, window_days=window)
    if as_json:
        echo_json(
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
