"""``amber export`` (a transcript's WACZ audit bundle) and ``amber verify-bundle`` (its
offline check: no server, no index)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from api.cli.shared import echo_json, opened


@click.command("export")
@click.option("--transcript", "transcript_id", help="The transcript to export.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--tenant", default="default", show_default=True)
@click.option("--print-key", is_flag=True, help="Print the bundle signing public key (PEM).")
@click.option(
    "--consistent-to",
    type=click.IntRange(min=1),
    help="Also carry the log checkpoint of this size and the consistency proof to it.",
)
def export(
    transcript_id: str | None,
    output: Path | None,
    tenant: str,
    print_key: bool,
    consistent_to: int | None,
) -> None:
    """Write a transcript's evidence as a signed WACZ 1.1.1 audit bundle.

    Example: amber export --transcript t-1 -o t-1.wacz
    """
    from archive.bundles.export import export_bundle
    from archive.bundles.signing import load_wacz_key, public_key_pem

    with opened() as archive:
        if print_key:
            click.echo(public_key_pem(load_wacz_key(archive.settings.data_dir)), nl=False)
            return
        if not transcript_id or output is None:
            raise click.UsageError("give --transcript ID and -o FILE.wacz (or --print-key)")
        bundle = export_bundle(archive, tenant, transcript_id, consistent_to=consistent_to)
    partial = output.with_name(output.name + ".partial")
    with partial.open("wb") as out:
        bundle.write_to(out)
    os.replace(partial, output)  # never a half-written bundle under the final name
    click.echo(f"wrote {output} ({bundle.size} bytes, {len(bundle.mementos)} mementos)", err=True)


@click.command("verify-bundle")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--vkey", "--log-vkey", "vkey", required=True, help="The log's verifier key, or a file."
)
@click.option("--tsa-ca", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--wacz-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The bundle signing public key (PEM, from amber export --print-key).",
)
def verify_bundle(bundle: Path, vkey: str, tsa_ca: Path | None, wacz_key: Path | None) -> None:
    """Check an audit bundle offline: zip and datapackage hashes, signature, WARC digests,
    leaves, inclusion proofs, checkpoint signature, timestamp and every quote. One line per
    citation; exits 1 on any failure.

    Example: amber verify-bundle t-1.wacz --vkey amber.vkey --wacz-key bundle-key.pem
    """
    from archive.bundles.bundlecheck import verify_bundle as check

    key = Path(vkey).read_text(encoding="utf-8").strip() if Path(vkey).is_file() else vkey
    report = check(
        bundle.read_bytes(),
        key,
        tsa_ca=tsa_ca.read_bytes() if tsa_ca else None,
        wacz_key=wacz_key.read_bytes() if wacz_key else None,
    )
    for line in report.lines():
        click.echo(line)
    click.echo(
        f"{'verified' if report.ok else 'NOT VERIFIED'}: {len(report.citations)} citations, "
        f"{report.records} WARC records",
        err=True,
    )
    if not report.ok:
        raise SystemExit(1)


@click.command("import")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tool", default="warc-import", show_default=True, help="Capture tool recorded.")
@click.option("--tenant", default="default", show_default=True)
@click.option(
    "--transcript",
    help="Restore an Amber bundle's citations into this transcript (default: the one each names).",
)
def import_archive(source: Path, tool: str, tenant: str, transcript: str | None) -> None:
    """Store every response and resource record of a WARC (.warc, .warc.gz) or WACZ as a
    memento, then the citations an Amber bundle states; idempotent. Prints a summary:
    records read, stored, already present, skipped; citations stored, present, skipped.

    To cite from imported mementos, add the --tool name to [citations] evidence_sources.

    Example: amber import crawl.wacz --tool browsertrix
    """
    import sys

    from archive.bundles.importer import import_file

    with opened() as archive:
        if sys.stderr.isatty():
            with click.progressbar(length=0, label="records", file=sys.stderr) as bar:
                summary = import_file(
                    archive,
                    source,
                    tenant=tenant,
                    tool=tool,
                    transcript=transcript,
                    progress=bar.update,
                )
        else:
            summary = import_file(archive, source, tenant=tenant, tool=tool, transcript=transcript)
    echo_json(summary.as_dict())
