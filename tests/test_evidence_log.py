"""The evidence log on both index backends: leaves sequenced with their rows (dense, in the
same transaction, append-only), the tree and its checkpoints, proofs that verify offline,
the self-audit catching each kind of tampering, and retention's tombstones and erasures."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fixtures_tsa import LocalTsa, running_tsa
from sqlalchemy import text

from archive.archive import Archive
from archive.citations import CitationRequest, QuoteRequest, SourceRequest
from archive.config import Settings
from archive.dates import utc_now
from archive.exceptions import LogMismatch
from archive.log.audit import audit
from archive.log.proofcheck import Checkpoint, ProofError, split_note, verify_proof_document
from archive.log.signing import NoteSigner
from archive.writes import MementoRequest

BASE_URL = "http://testserver"
CAPTURED = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
PAGE = "<html><body><p>The policy grants sixteen weeks of paid parental leave.</p></body></html>"


@pytest.fixture()
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "amber-data",
        database_url=database_url,
        public_base_url=BASE_URL,
        durability="relaxed",
    )


@pytest.fixture()
def archive(settings: Settings) -> Iterator[Archive]:
    opened = Archive.open(settings)
    yield opened
    opened.close()


def write(archive: Archive, n: int, prefix: str = "p", tenant: str = "default") -> list[Any]:
    return [
        archive.write_memento(
            MementoRequest(
                uri_r=f"https://example.org/{prefix}{i}",
                content=f"bytes of {prefix}{i}".encode(),
                content_type="text/plain",
                captured_at=CAPTURED,
            ),
            tenant=tenant,
        ).memento
        for i in range(n)
    ]


def cite(archive: Archive, quote: str = "sixteen weeks of paid parental leave") -> Any:
    archive.transcripts.put("default", "t-1", "P7Y", {})
    page = SourceRequest(
        uri_r="https://example.org/policy",
        content=PAGE.encode(),
        content_type="text/html",
        tool="http.get",
    )
    result = archive.citations.cite(
        "default", "t-1", [CitationRequest(quote=QuoteRequest(quote), source=page)]
    )
    [made] = result.citations
    return made


def sql(archive: Archive, statement: str, **params: Any) -> list[Any]:
    with archive.index.write() as connection:
        result = connection.execute(text(statement), params)
        return list(result.all()) if result.returns_rows else []


def vkey(archive: Archive) -> str:
    return archive.evidence_log().signer.vkey()


def check(archive: Archive, *, full: bool = False) -> None:
    archive.evidence_log().step(force=True)
    audit(archive.index, vkey(archive), read_blob=archive.blobs.get if full else None)


# -- leaves and sequencing ------------------------------------------------------------------


def test_every_memento_and_citation_gets_one_canonical_leaf(archive: Archive) -> None:
    written = write(archive, 3)
    citation = cite(archive)
    rows = sql(archive, "SELECT idx, kind, subject, statement FROM log_leaves ORDER BY idx")
    assert [r.idx for r in rows] == list(range(len(rows)))
    kinds = [r.kind for r in rows]
    assert kinds[:3] == ["memento"] * 3 and kinds[-1] == "citation"
    # The passage memento, and the cited document when the policy keeps documents.
    assert kinds.count("memento") == 4 + archive.settings.citations.keep_document
    first = json.loads(rows[0].statement)
    assert first["v"] == 1 and first["type"] == "memento" and len(first["nonce"]) == 32
    assert first["id"] == written[0].id and first["blake3"] == written[0].content_hash
    assert first["uri_r"] == "https://example.org/p0" and first["size"] == len(b"bytes of p0")
    import hashlib

    assert first["sha256"] == hashlib.sha256(b"bytes of p0").hexdigest()
    # RFC 8785: sorted keys, no spaces; the stored text is exactly what is hashed.
    assert rows[0].statement == json.dumps(first, sort_keys=True, separators=(",", ":"))
    cited = json.loads(rows[-1].statement)
    assert cited["id"] == citation.id and cited["transcript_id"] == "t-1"
    assert set(cited) >= {"document_sha256", "quote_sha256", "selector", "created_at", "run_id"}
    # Writing the same memento again adds no leaf.
    write(archive, 1)
    assert len(sql(archive, "SELECT idx FROM log_leaves")) == len(rows)


def test_a_rolled_back_write_leaves_no_leaf_and_no_gap(archive: Archive) -> None:
    write(archive, 2)
    assert archive.index.log is not None
    with pytest.raises(RuntimeError):
        with archive.index.write() as connection:
            from archive.log.statements import tombstone_statement

            archive.index.log.append(
                connection, [tombstone_statement("x" * 32, "default", utc_now(), "expiry", None)]
            )
            raise RuntimeError("the write fails after sequencing")
    write(archive, 2, prefix="q")
    assert [r.idx for r in sql(archive, "SELECT idx FROM log_leaves ORDER BY idx")] == [0, 1, 2, 3]
    [(value,)] = sql(archive, "SELECT value FROM log_counters WHERE name = 'sequenced'")
    assert value == 4


def test_leaves_refuse_update_and_delete_but_allow_blanking(archive: Archive) -> None:
    write(archive, 2)
    for statement in (
        "UPDATE log_leaves SET statement = '{}' WHERE idx = 0",
        "UPDATE log_leaves SET statement = NULL, leaf_hash = '00' WHERE idx = 0",
        "UPDATE log_leaves SET subject = 'other' WHERE idx = 0",
        "DELETE FROM log_leaves WHERE idx = 1",
    ):
        with pytest.raises(Exception, match="append-only"):
            sql(archive, statement)
    archive.evidence_log().step(force=True)
    for statement in (
        "UPDATE log_checkpoints SET root = 'ab'",
        "DELETE FROM log_checkpoints",
        "UPDATE log_nodes SET hash = 'ab'",
        "DELETE FROM log_nodes",
    ):
        with pytest.raises(Exception, match="append-only"):
            sql(archive, statement)
    sql(archive, "UPDATE log_leaves SET statement = NULL WHERE idx = 0")
    [row] = sql(archive, "SELECT statement, leaf_hash FROM log_leaves WHERE idx = 0")
    assert row.statement is None and len(row.leaf_hash) == 64


def test_concurrent_writers_get_dense_indexes(archive: Archive) -> None:
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            write(archive, 15, prefix=f"w{k}-")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = sql(archive, "SELECT idx, subject FROM log_leaves ORDER BY idx")
    assert [r.idx for r in rows] == list(range(90))
    assert len({r.subject for r in rows}) == 90
    check(archive)


# -- tree, checkpoints, proofs ----------------------------------------------------------------


def test_checkpoints_are_signed_consistent_and_rate_limited(archive: Archive) -> None:
    evidence = archive.evidence_log()
    write(archive, 3)
    first = evidence.step(force=True)
    assert first is not None and first.size == 3
    write(archive, 2, prefix="q")
    assert evidence.step().size == 3  # type: ignore[union-attr]  # within the interval
    second = evidence.step(force=True)
    assert second is not None and second.size == 5
    origin, size, _root, blank = second.note.split("\n")[:4]
    assert origin == "testserver/log" and size == "5" and blank == ""
    proof = evidence.consistency(3, 5)
    from archive.log.proofcheck import verify_consistency

    verify_consistency(3, 5, proof, first.root, second.root)


def test_proofs_of_every_leaf_verify_offline(archive: Archive) -> None:
    mementos = write(archive, 11)
    citation = cite(archive)
    evidence = archive.evidence_log()
    evidence.step(force=True)
    write(archive, 6, prefix="later")
    latest = evidence.step(force=True)  # proofs come with a consistency proof to this one
    assert latest is not None
    key = vkey(archive)
    for m in mementos:
        document = evidence.proof("memento", m.id, "default")
        content = archive.read_content(m) if hasattr(archive, "read_content") else None
        verified = verify_proof_document(document, key, content=content)
        assert verified.statement["id"] == m.id
        assert verified.checkpoint == Checkpoint.parse(split_note(latest.note)[0])
    document = json.loads(json.dumps(evidence.proof("citation", citation.id, "default")))
    assert verify_proof_document(document, key).statement["type"] == "citation"
    with pytest.raises(ProofError):  # another key: never the key the proof carries
        other = NoteSigner(
            "testserver/log",
            __import__(
                "cryptography.hazmat.primitives.asymmetric.ed25519", fromlist=["x"]
            ).Ed25519PrivateKey.generate(),
        )
        verify_proof_document(document, other.vkey())
    with pytest.raises(ProofError):
        verify_proof_document(
            evidence.proof("memento", mementos[0].id, "default"), key, content=b"other bytes"
        )
    from archive.exceptions import NotFound

    with pytest.raises(NotFound):  # another tenant's leaf is not found
        evidence.proof("memento", mementos[0].id, "acme")


def test_tiles_hold_the_stored_hashes(archive: Archive) -> None:
    write(archive, 300)
    evidence = archive.evidence_log()
    evidence.step(force=True)
    full = evidence.tile(0, 0, 256)
    assert len(full) == 256 * 32
    partial = evidence.tile(0, 1, 44)
    from archive.log.proofcheck import leaf_hash

    [row] = sql(archive, "SELECT statement FROM log_leaves WHERE idx = 256")
    assert partial[:32] == leaf_hash(row.statement.encode())
    level1 = evidence.tile(1, 0, 1)  # the node over leaves 0..255
    from archive.log.tree import root

    with archive.index.read() as connection:
        assert level1 == root(connection, 256)


# -- tampering ---------------------------------------------------------------------------------


def _drop_guards(archive: Archive) -> None:
    """What an attacker with the database's keys can do: remove the triggers."""
    if archive.index.dialect == "sqlite":
        for name in (
            "log_leaves_no_update",
            "log_leaves_no_delete",
            "log_checkpoints_no_update",
            "log_checkpoints_no_delete",
        ):
            sql(archive, f"DROP TRIGGER {name}")
    else:
        for table in ("log_leaves", "log_checkpoints"):
            sql(archive, f"DROP TRIGGER {table}_append_only ON {table}")


@pytest.mark.parametrize(
    ("tamper", "found"),
    [
        ("UPDATE mementos SET uri_r = 'https://evil.example/' WHERE uri_r LIKE '%p1'", "uri_r"),
        (
            "UPDATE mementos SET captured_at = '2001-01-01 00:00:00' WHERE uri_r LIKE '%p1'",
            "memento_datetime",
        ),
        ("UPDATE mementos SET size = size + 1 WHERE uri_r LIKE '%p1'", "size"),
        (
            "UPDATE mementos SET content_hash = "
            "(SELECT content_hash FROM mementos WHERE uri_r LIKE '%p2') WHERE uri_r LIKE '%p1'",
            "blake3",
        ),
        ("UPDATE log_leaves SET statement = replace(statement, 'p1', 'p9') WHERE idx = 1", "hash"),
        ("DELETE FROM log_leaves WHERE idx = 1", "leaf 1 is missing"),
        (
            "UPDATE log_leaves SET leaf_hash = CASE idx WHEN 1 THEN "
            "(SELECT leaf_hash FROM log_leaves WHERE idx = 2) ELSE "
            "(SELECT leaf_hash FROM log_leaves WHERE idx = 1) END, statement = NULL "
            "WHERE idx IN (1, 2)",
            "index 1",
        ),
    ],
    ids=["uri_r", "memento_datetime", "size", "content_hash", "statement", "deleted", "swapped"],
)
def test_the_self_audit_finds_each_tampering(archive: Archive, tamper: str, found: str) -> None:
    write(archive, 4)
    check(archive)
    _drop_guards(archive)
    sql(archive, tamper)
    with pytest.raises(LogMismatch, match=found):
        audit(archive.index, vkey(archive))


def test_the_full_audit_finds_a_changed_blob(archive: Archive, settings: Settings) -> None:
    [memento] = write(archive, 1)
    check(archive, full=True)
    digest = memento.content_hash.split(":", 1)[1]
    [path] = [p for p in (settings.data_dir / "blobs").rglob(f"*{digest}*") if p.is_file()]
    path.chmod(0o644)
    path.write_bytes(b"Bytes of p0")
    with pytest.raises(LogMismatch, match=memento.id):
        check(archive, full=True)


def test_a_forked_checkpoint_is_found(archive: Archive) -> None:
    write(archive, 4)
    evidence = archive.evidence_log()
    latest = evidence.step(force=True)
    assert latest is not None
    _drop_guards(archive)
    from archive.log.proofcheck import Checkpoint

    forged_root = bytes(32)
    forged = evidence.signer.sign(Checkpoint(evidence.signer.name, 4, forged_root).text())
    sql(archive, "UPDATE log_checkpoints SET root = :r, note = :n", r=forged_root.hex(), n=forged)
    with pytest.raises(LogMismatch, match="checkpoint 4"):
        audit(archive.index, vkey(archive))
    from archive.log.proofcheck import verify_consistency

    with pytest.raises(ProofError):  # two signed roots for one size: a fork, offline too
        verify_consistency(4, 4, [], latest.root, forged_root)


def test_a_memento_without_its_leaf_is_found(archive: Archive) -> None:
    write(archive, 2)
    check(archive)
    _drop_guards(archive)
    sql(archive, "DELETE FROM log_leaves WHERE idx = 1")
    sql(archive, "UPDATE log_counters SET value = 1 WHERE name = 'sequenced'")
    sql(archive, "DELETE FROM log_checkpoints")
    with pytest.raises(LogMismatch, match="has 0 leaves"):
        audit(archive.index, vkey(archive))


# -- retention -------------------------------------------------------------------------------


def test_a_swept_memento_leaves_a_tombstone_and_its_proof(archive: Archive) -> None:
    [memento] = write(archive, 1)
    archive.retention.sweep(now=utc_now() + timedelta(days=30))
    rows = sql(archive, "SELECT kind, subject, statement FROM log_leaves ORDER BY idx")
    assert [r.kind for r in rows] == ["memento", "tombstone"]
    stone = json.loads(rows[1].statement)
    assert stone["memento_id"] == memento.id and stone["deletion"] == "expiry"
    assert stone["policy"]["policy"] == "uncited-grace"
    check(archive)
    document = archive.evidence_log().proof("memento", memento.id, "default")
    assert verify_proof_document(document, vkey(archive)).statement["id"] == memento.id


def test_an_erased_statement_is_gone_and_other_proofs_still_verify(archive: Archive) -> None:
    kept, erased = write(archive, 2)
    evidence = archive.evidence_log()
    evidence.step(force=True)
    archive.retention.erase("default", erased.id, "takedown", "admin-key")
    rows = sql(archive, "SELECT kind, subject, statement FROM log_leaves ORDER BY idx")
    assert [(r.kind, r.subject) for r in rows][-1] == ("tombstone", erased.id)
    [gone] = [r for r in rows if r.kind == "memento" and r.subject == erased.id]
    assert gone.statement is None
    assert not [r for r in rows if r.statement and "p1" in r.statement]
    check(archive, full=True)
    document = evidence.proof("memento", kept.id, "default")
    verify_proof_document(document, vkey(archive))
    blank = evidence.proof("memento", erased.id, "default")
    assert blank["statement"] is None and blank["leaf_hash"]


# -- RFC 3161 timestamps -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_tsa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTsa]:
    with running_tsa(tmp_path_factory.mktemp("tsa")) as tsa:
        yield tsa


def test_timestamped_proofs_verify_against_the_tsa_ca(
    settings: Settings, local_tsa: LocalTsa
) -> None:
    stamped = settings.with_overrides(tsa_url=local_tsa.url, tsa_interval=3600.0)
    archive = Archive.open(stamped)
    try:
        [first] = write(archive, 1)
        evidence = archive.evidence_log()
        anchored = evidence.step(force=True)  # the first checkpoint is timestamped at once
        assert anchored is not None and anchored.timestamp is not None
        write(archive, 3, prefix="q")
        latest = evidence.step(force=True)
        assert latest is not None and latest.size == 4
        assert latest.timestamp is None  # within AMBER_TSA_INTERVAL of the last one
        document = evidence.proof("memento", first.id, "default")
        assert document["timestamp"] is not None
        assert document["consistency"]["old_size"] == 1
        assert document["consistency"]["new_size"] == 4
        ca = local_tsa.ca_pem.read_bytes()
        verified = verify_proof_document(document, vkey(archive), tsa_ca=ca)
        assert verified.timestamped and verified.checkpoint.size == 1
        # On demand: a later leaf gets its own anchor.
        evidence.timestamp()
        [later] = sql(archive, "SELECT subject FROM log_leaves WHERE idx = 3")
        document = evidence.proof("memento", later.subject, "default")
        assert verify_proof_document(document, vkey(archive), tsa_ca=ca).checkpoint.size == 4
        # A timestamp over another checkpoint is refused, and so is a proof without one.
        earlier = evidence.proof("memento", first.id, "default")["timestamp"]
        with pytest.raises(ProofError, match="timestamp"):
            verify_proof_document({**document, "timestamp": earlier}, vkey(archive), tsa_ca=ca)
        with pytest.raises(ProofError, match="timestamp"):
            verify_proof_document({**document, "timestamp": None}, vkey(archive), tsa_ca=ca)
    finally:
        archive.close()


# -- HTTP and CLI --------------------------------------------------------------------------------


def test_the_http_routes_serve_checkpoints_tiles_and_tenant_scoped_proofs(
    archive: Archive, settings: Settings
) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app
    from archive.access.keys import Role

    keys = {t: archive.keys.create(t, Role.AUDITOR).key for t in ("default", "acme")}
    [memento] = write(archive, 1)
    with TestClient(create_app(settings, archive=archive)) as client:
        as_default = {"Authorization": f"Bearer {keys['default']}"}
        answer = client.get(f"/api/v1/mementos/{memento.id}/proof", headers=as_default)
        assert answer.status_code == 200, answer.text
        verify_proof_document(answer.json(), vkey(archive))
        other = {"Authorization": f"Bearer {keys['acme']}"}
        assert client.get(f"/api/v1/mementos/{memento.id}/proof", headers=other).status_code == 404
        assert client.get(f"/api/v1/mementos/{memento.id}/proof").status_code == 401
        note = client.get("/log/checkpoint")
        assert note.status_code == 200 and note.text.startswith("testserver/log\n1\n")
        assert len(client.get("/log/tile/0/000.p/1").content) == 32
        assert client.get("/log/tile/0/000").status_code == 404  # not full yet
        assert client.get("/log/tile/entries/000.p/1").status_code == 404
        assert client.get("/log/consistency/1/1").json() == {
            "old_size": 1,
            "new_size": 1,
            "proof": [],
        }
        assert client.get("/log/consistency/2/1").status_code == 400
        assert client.get("/log/consistency/1/9").status_code == 404


def test_the_cli_prints_the_key_audits_and_verifies_proofs(
    archive: Archive, settings: Settings, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from api.cli import main

    [memento] = write(archive, 1)
    document = archive.evidence_log().proof("memento", memento.id, "default")
    env = {
        "AMBER_DATA_DIR": str(settings.data_dir),
        "AMBER_DATABASE_URL": settings.resolved_database_url,
        "AMBER_PUBLIC_BASE_URL": BASE_URL,
    }
    runner = CliRunner()
    key = runner.invoke(main, ["log", "key"], env=env)
    assert key.exit_code == 0 and key.output.strip() == vkey(archive)
    audited = runner.invoke(main, ["log", "verify", "--full"], env=env)
    assert audited.exit_code == 0, audited.output
    assert json.loads(audited.output)["mementos"] == 1
    (tmp_path / "proof.json").write_text(json.dumps(document))
    (tmp_path / "vkey").write_text(key.output)
    (tmp_path / "content").write_bytes(b"bytes of p0")
    args = ["proof", "verify", str(tmp_path / "proof.json"), "--vkey", str(tmp_path / "vkey")]
    ok = runner.invoke(main, [*args, "--content", str(tmp_path / "content")], env=env)
    assert ok.exit_code == 0, ok.output
    (tmp_path / "content").write_bytes(b"bytes of p1")
    refused = runner.invoke(main, [*args, "--content", str(tmp_path / "content")], env=env)
    assert refused.exit_code == 1 and "SHA-256" in refused.output
    _drop_guards(archive)
    sql(archive, "UPDATE mementos SET uri_r = 'https://evil.example/'")
    found = runner.invoke(main, ["log", "verify"], env=env)
    assert found.exit_code == 1 and "uri_r" in found.output
