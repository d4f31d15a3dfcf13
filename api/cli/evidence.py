"""``amber log`` (the evidence log: key, checkpoint, timestamp, self-audit) and ``amber proof
verify`` (the offline verifier: no server, no index)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from api.cli.shared import echo_json, opened


@click.group("log")
def log_group() -> None:
    """The evidence log: a signed Merkle log of every memento, citation and deletion.

    Example: amber log key > amber.vkey
    """


@log_group.command("key")
def log_key() -> None:
    """Print the verifier key (signed-note vkey) to publish out of band.

    Example: amber log key > amber.vkey
    """
    with opened() as archive:
        click.echo(archive.evidence_log().signer.vkey())


@log_group.command("checkpoint")
@click.option("--timestamp", is_flag=True, help="Also anchor it with an RFC 3161 timestamp now.")
def log_checkpoint(timestamp: bool) -> None:
    """Integrate what is sequenced, sign a checkpoint now, and print it.

    Example: amber log checkpoint --timestamp
    """
    with opened() as archive:
        evidence = archive.evidence_log()
        latest = evidence.step(force=True)
        if latest is None:
            raise click.ClickException("the log is empty: nothing to sign yet")
        if timestamp:
            latest = evidence.timestamp(latest.size)
        click.echo(latest.note, nl=False)


@log_group.command("verify")
@click.option("--full", is_flag=True, help="Also hash every live memento's bytes.")
def log_verify(full: bool) -> None:
    """Recompute the tree from the stored leaves, check every checkpoint, and check that
    every memento, citation and tombstone has exactly one leaf matching the index.

    Exits 1 naming the first mismatch. Example: amber log verify --full
    """
    from archive.exceptions import LogMismatch
    from archive.log.audit import audit

    with opened() as archive:
        evidence = archive.evidence_log()
        evidence.step(force=True)
        try:
            report = audit(
                archive.index,
                evidence.signer.vkey(),
                read_blob=archive.blobs.get if full else None,
            )
        except LogMismatch as mismatch:
            click.echo(f"MISMATCH: {mismatch.message}", err=True)
            raise SystemExit(1) from None
    echo_json({"verified": True, **vars(report)})


@click.group("proof")
def proof_group() -> None:
    """Proof documents (GET /api/v1/mementos/{id}/proof) checked offline.

    Example: amber proof verify proof.json --vkey amber.vkey
    """


@proof_group.command("verify")
@click.argument("proof_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--vkey", required=True, help="The log's verifier key, or a file holding it.")
@click.option("--tsa-ca", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--content", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def proof_verify(proof_file: Path, vkey: str, tsa_ca: Path | None, content: Path | None) -> None:
    """Check a proof with no server and no index: the statement against --content, the
    inclusion proof against the checkpoint, its signature against --vkey (never a key in
    the proof) and its timestamp against --tsa-ca. Exits 1 when anything fails.

    Example: amber proof verify proof.json --vkey amber.vkey --tsa-ca tsa-ca.pem
    """
    from archive.log.proofcheck import ProofError, verify_proof_document

    key = Path(vkey).read_text(encoding="utf-8").strip() if Path(vkey).is_file() else vkey
    try:
        document = json.loads(proof_file.read_text(encoding="utf-8"))
        verified = verify_proof_document(
            document,
            key,
            tsa_ca=tsa_ca.read_bytes() if tsa_ca else None,
            content=content.read_bytes() if content else None,
        )
    except (ProofError, ValueError) as exc:
        click.echo(f"NOT VERIFIED: {exc}", err=True)
        raise SystemExit(1) from None
    echo_json(
        {
            "verified": True,
            "index": verified.index,
            "tree_size": verified.checkpoint.size,
            "timestamp_checked": verified.timestamped,
            "statement": verified.statement,
        }
    )
