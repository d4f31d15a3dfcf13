"""Audit bundles (WACZ): deterministic on both backends, accepted by py-wacz and warcio,
served to auditors, checked offline by a copy of the checker, and every tampering in the
mutation corpus is caught."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import random
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from api.cli import main
from archive.archive import Archive
from archive.bundles import bundlecheck, bundlefile, warcfile
from archive.bundles.bundlecheck import canonical_zip, digest_document, verify_bundle
from archive.bundles.export import export_bundle
from archive.bundles.signing import sign_hash
from archive.citations import CitationRequest, QuoteRequest, SourceRequest
from archive.config import Settings
from archive.exceptions import InvalidInput, NotFound
from archive.log import proofcheck
from archive.log.proofcheck import Checkpoint, split_note
from archive.log.signing import NoteSigner

BASE_URL = "http://testserver"
CAPTURED = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
POLICY = (
    "<html><body><h1>Leave</h1><p>The policy grants sixteen weeks of paid parental leave."
    "</p><p>Requests go to the people team at least four weeks ahead.</p></body></html>"
)
PRICES = "Plain prices: the basic plan costs nine euros a month, billed yearly."


def settings_for(data_dir: Path, database_url: str | None = None) -> Settings:
    return Settings(
        data_dir=data_dir,
        database_url=database_url,
        public_base_url=BASE_URL,
        durability="relaxed",
        extra={"citations": {"keep_document": True}},
    )


def populate(archive: Archive) -> None:
    archive.transcripts.put("default", "t-1", "P7Y", {})
    policy = SourceRequest(
        uri_r="https://example.org/policy",
        content=POLICY.encode(),
        content_type="text/html; charset=utf-8",
        captured_at=CAPTURED,
        tool="http.get",
        http_status=200,
        headers={"Content-Type": "text/html; charset=utf-8", "Content-Encoding": "gzip"},
    )
    prices = SourceRequest(
        uri_r="https://example.com/prices",
        content=PRICES.encode(),
        content_type="text/plain",
        captured_at=CAPTURED,
        tool="http.get",
    )
    result = archive.citations.cite(
        "default",
        "t-1",
        [
            CitationRequest(
                quote=QuoteRequest("sixteen weeks of paid parental leave"), source=policy
            ),
            CitationRequest(quote=QuoteRequest("at least four weeks ahead"), source=policy),
            CitationRequest(quote=QuoteRequest("nine euros a month"), source=prices),
        ],
        run_id="run-7",
    )
    assert not result.errors and len(result.citations) == 3


def fresh_bundle(data_dir: Path) -> bytes:
    """The bundle of :func:`populate`'s transcript, in a new SQLite archive."""
    opened = Archive.open(settings_for(data_dir))
    try:
        populate(opened)
        return export_bundle(opened, "default", "t-1").data
    finally:
        opened.close()


@pytest.fixture()
def archive(database_url: str, tmp_path: Path) -> Iterator[Archive]:
    opened = Archive.open(settings_for(tmp_path / "amber-data", database_url))
    populate(opened)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, str]:
    """One SQLite bundle and the log's vkey, for the checks that need no second backend."""
    opened = Archive.open(settings_for(tmp_path_factory.mktemp("bundle") / "amber-data"))
    try:
        populate(opened)
        return export_bundle(opened, "default", "t-1").data, opened.evidence_log().signer.vkey()
    finally:
        opened.close()


def test_two_exports_are_byte_identical_and_verify(archive: Archive) -> None:
    first = export_bundle(archive, "default", "t-1")
    second = export_bundle(archive, "default", "t-1")
    assert first.data == second.data
    report = verify_bundle(first.data, archive.evidence_log().signer.vkey())
    assert report.ok, report.lines()
    assert len(report.citations) == 3 and all(line.startswith("\u2713") for line in report.lines())
    # The policy's two quotes share one passage (the page is shorter than the context), and
    # the plain-text page's passage is its whole text: the same memento as its document.
    assert report.records == 3 + 3  # mementos, citation records


@pytest.mark.seaweedfs
@pytest.mark.postgres
def test_exports_from_seaweedfs_are_byte_identical_and_verify(
    seaweedfs_settings: Settings, postgres_url: str, tmp_path: Path
) -> None:
    """The production shape: blobs in SeaweedFS (versioned, read back by version), the
    index in PostgreSQL. Two exports give the same bytes, and they verify."""
    local = settings_for(tmp_path / "amber-data", postgres_url)
    opened = Archive.open(
        seaweedfs_settings.with_overrides(
            data_dir=local.data_dir,
            database_url=postgres_url,
            public_base_url=BASE_URL,
            durability="relaxed",
            extra=local.extra,
        )
    )
    try:
        assert opened.settings.blob_store.startswith("s3://")
        populate(opened)
        first = export_bundle(opened, "default", "t-1").data
        second = export_bundle(opened, "default", "t-1").data
        report = verify_bundle(first, opened.evidence_log().signer.vkey())
    finally:
        opened.close()
    assert first == second
    assert report.ok and len(report.citations) == 3, report.lines()
    payloads = {r.payload for r in warcfile.read_records(unpack(first)["archive/data.warc.gz"])}
    assert POLICY.encode() in payloads and PRICES.encode() in payloads


def test_the_warc_holds_what_the_issue_asks(made: tuple[bytes, str]) -> None:
    files = bundlecheck._open_zip(made[0])
    records = list(warcfile.read_records(files["archive/data.warc.gz"]))
    kinds = sorted(r.type for r in records)
    assert kinds == ["metadata"] * 3 + ["resource"] * 2 + ["response"]
    response = next(r for r in records if r.type == "response")
    assert response.get("WARC-Target-URI") == "https://example.org/policy"
    assert response.get("WARC-Date") == "2025-03-01T10:00:00Z"
    assert response.payload == POLICY.encode()
    # The stored bytes are decoded: no header may tell a replayer to gunzip them.
    assert b"gzip" not in response.block.partition(b"\r\n\r\n")[0]
    for record in records:
        assert record.get("WARC-Block-Digest").startswith("sha256:")  # type: ignore[union-attr]
        assert record.get("WARC-Payload-Digest").startswith("sha256:")  # type: ignore[union-attr]
        if record.type != "metadata":
            assert record.get("Amber-Content-Address").startswith("blake3:")  # type: ignore[union-attr]
        else:
            assert record.get("WARC-Refers-To") is not None
    lines = files["citations/citations.jsonl"].decode().splitlines()
    assert [json.loads(line)["run_id"] for line in lines] == ["run-7"] * 3


def test_warcio_reads_and_checks_the_warc(made: tuple[bytes, str], tmp_path: Path) -> None:
    from warcio.archiveiterator import ArchiveIterator

    files = bundlecheck._open_zip(made[0])
    warc = tmp_path / "data.warc.gz"
    warc.write_bytes(files["archive/data.warc.gz"])
    with warc.open("rb") as stream:
        seen = [(r.rec_type, r.content_stream().read()) for r in ArchiveIterator(stream)]
    assert ("response", POLICY.encode()) in seen
    checked = subprocess.run(
        [sys.executable, "-c", "from warcio.cli import main; main()", "check", "-v", str(warc)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("digest pass") == 6


def test_py_wacz_validates_the_bundle(made: tuple[bytes, str], tmp_path: Path) -> None:
    bundle = tmp_path / "t-1.wacz"
    bundle.write_bytes(made[0])
    validated = subprocess.run(
        [sys.executable, "-c", "from wacz.main import main; main()", "validate", "-f", str(bundle)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert "Validation succeeded" in validated.stdout


def test_a_copied_out_checker_needs_no_amber(made: tuple[bytes, str], tmp_path: Path) -> None:
    for module in (bundlecheck, warcfile, proofcheck):
        shutil.copy(str(module.__file__), tmp_path)
    (tmp_path / "b.wacz").write_bytes(made[0])
    (tmp_path / "vkey").write_text(made[1])
    # None in sys.modules makes every `import archive...` fail: the fallback imports run.
    code = (
        "import sys, runpy; sys.modules['archive'] = None; sys.argv = ['bundlecheck.py', "
        "'b.wacz', 'vkey']; runpy.run_path('bundlecheck.py', run_name='__main__')"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.count("\u2713") == 3


def test_the_api_streams_the_same_bundle(archive: Archive) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    with TestClient(create_app(archive.settings, archive=archive, auth=False)) as client:
        got = client.get("/api/v1/transcripts/t-1/export")
        missing = client.get("/api/v1/transcripts/nobody/export")
    assert got.status_code == 200 and got.headers["content-type"] == "application/wacz"
    assert got.content == export_bundle(archive, "default", "t-1").data
    assert missing.status_code == 404


def test_a_bundle_spilled_to_disk_is_the_same_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export streams records into spooled files: past the spool size they go to disk,
    and the bytes are those of the same bundle kept in memory."""
    opened = Archive.open(settings_for(tmp_path / "amber-data"))
    try:
        populate(opened)
        in_memory = export_bundle(opened, "default", "t-1")
        monkeypatch.setattr(bundlefile, "SPOOL", 512)
        bundle = export_bundle(opened, "default", "t-1")
        spilled = bundle.file._rolled  # type: ignore[attr-defined]
        data = b"".join(bundle.chunks(1000))
        vkey = opened.evidence_log().signer.vkey()
    finally:
        opened.close()
    assert spilled and not in_memory.file._rolled  # type: ignore[attr-defined]
    assert bundle.file.closed and len(data) == bundle.size > 512
    assert data == in_memory.data
    assert verify_bundle(data, vkey).ok


def test_a_consistency_proof_to_a_later_checkpoint_is_carried_and_checked(
    archive: Archive,
) -> None:
    """Asked for a later checkpoint, the bundle (still pinned to its own) carries it and the
    consistency proof to it: deterministic, verified, and a forged one is caught."""
    pinned = export_bundle(archive, "default", "t-1").data
    archive.transcripts.put("default", "t-2", "P7Y", {})
    other = SourceRequest(
        uri_r="https://example.net/later",
        content=b"Later pages add leaves to the log after the bundle's checkpoint.",
        content_type="text/plain",
        captured_at=CAPTURED,
        tool="http.get",
    )
    archive.citations.cite(
        "default", "t-2", [CitationRequest(quote=QuoteRequest("add leaves"), source=other)]
    )
    log = archive.evidence_log()
    log.step(force=True)
    latest = log.latest()
    assert latest is not None
    vkey = log.signer.vkey()
    size = unpack(pinned)["proofs/checkpoint.txt"].decode().split("\n")[1]
    assert latest.size > int(size)
    assert export_bundle(archive, "default", "t-1").data == pinned  # later leaves: no change
    first = export_bundle(archive, "default", "t-1", consistent_to=latest.size).data
    assert export_bundle(archive, "default", "t-1", consistent_to=latest.size).data == first
    files = unpack(first)
    assert files["proofs/checkpoint.txt"] == unpack(pinned)["proofs/checkpoint.txt"]
    assert files[bundlecheck.LATER_CHECKPOINT].decode() == latest.note
    report = verify_bundle(first, vkey)
    assert report.ok and len(report.citations) == 3, report.lines()
    stated = json.loads(files[bundlecheck.CONSISTENCY])
    assert stated["proof"], stated
    stated["proof"][0] = base64.b64encode(b"\0" * 32).decode()
    forged = {**files, bundlecheck.CONSISTENCY: json.dumps(stated).encode()}
    assert_caught(repack(forged), vkey, "a forged consistency proof")
    without_proof = {k: v for k, v in files.items() if k != bundlecheck.CONSISTENCY}
    package = json.loads(files["datapackage.json"])
    package["resources"] = [r for r in package["resources"] if r["path"] != bundlecheck.CONSISTENCY]
    without_proof["datapackage.json"] = json.dumps(package).encode()
    assert_caught(repack(without_proof), vkey, "a later checkpoint without its proof")
    with pytest.raises(InvalidInput):
        export_bundle(archive, "default", "t-1", consistent_to=1)
    with pytest.raises(NotFound):
        export_bundle(archive, "default", "t-1", consistent_to=latest.size + 1000)


def test_the_cli_exports_verifies_and_fails_with_exit_1(tmp_path: Path) -> None:
    data_dir = tmp_path / "amber-data"
    opened = Archive.open(settings_for(data_dir))
    try:
        populate(opened)
        vkey = opened.evidence_log().signer.vkey()
    finally:
        opened.close()
    env = {"AMBER_DATA_DIR": str(data_dir), "AMBER_PUBLIC_BASE_URL": BASE_URL}
    runner = CliRunner()
    out = tmp_path / "t-1.wacz"
    exported = runner.invoke(main, ["export", "--transcript", "t-1", "-o", str(out)], env=env)
    assert exported.exit_code == 0, exported.output
    key = runner.invoke(main, ["export", "--print-key"], env=env)
    assert key.output.startswith("-----BEGIN PUBLIC KEY-----")
    (tmp_path / "key.pem").write_text(key.output)
    args = ["verify-bundle", str(out), "--vkey", vkey, "--wacz-key", str(tmp_path / "key.pem")]
    verified = runner.invoke(main, args)
    assert verified.exit_code == 0 and verified.output.count("\u2713") == 3, verified.output
    damaged = bytearray(out.read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    out.write_bytes(bytes(damaged))
    failed = runner.invoke(main, args)
    assert failed.exit_code == 1 and "\u2717" in failed.output


# -- the mutation corpus ------------------------------------------------------------------


def unpack(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as bundle:
        return {name: bundle.read(name) for name in bundle.namelist()}


def repack(files: dict[str, bytes], key: ec.EllipticCurvePrivateKey | None = None) -> bytes:
    """A well-formed bundle of these files: datapackage hashes recomputed and signed again
    (by a forger's key), so only the evidence itself can give the forgery away."""
    key = key or ec.generate_private_key(ec.SECP384R1())
    package = json.loads(files["datapackage.json"])
    for resource in package["resources"]:
        data = files[resource["path"]]
        resource["hash"] = "sha256:" + hashlib.sha256(data).hexdigest()
        resource["bytes"] = len(data)
    datapackage = json.dumps(package, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"
    digest = "sha256:" + hashlib.sha256(datapackage).hexdigest()
    from cryptography.hazmat.primitives import serialization

    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    files = {**files, "datapackage.json": datapackage}
    files["datapackage-digest.json"] = digest_document(
        digest,
        sign_hash(key, digest),
        base64.b64encode(public).decode(),
        package["created"],
        package["software"],
    )
    return canonical_zip(files, package["created"])


def assert_caught(data: bytes, vkey: str, what: str) -> None:
    report = verify_bundle(data, vkey)
    assert not report.ok, f"{what} went unnoticed"


def test_every_flipped_byte_is_caught(made: tuple[bytes, str]) -> None:
    data, vkey = made
    rng = random.Random(24)
    for position in rng.sample(range(len(data)), 500):
        damaged = bytearray(data)
        damaged[position] ^= 1 << rng.randrange(8)
        assert_caught(bytes(damaged), vkey, f"a flipped bit at byte {position}")


def _rewrite_payload(warc: bytes) -> bytes:
    out = []
    for record in warcfile.read_records(warc):
        headers = [
            (k, v)
            for k, v in record.headers
            if k not in ("WARC-Block-Digest", "WARC-Payload-Digest", "Content-Length")
        ]
        block = record.block
        if record.type == "response":
            block = block.replace(b"sixteen weeks", b"twenty weeks!")
        out.append(
            warcfile.record_bytes(headers, block, warcfile.WarcRecord(headers, block, 0, 0).payload)
        )
    return b"".join(out)


def test_a_payload_changed_with_digests_recomputed_is_caught(made: tuple[bytes, str]) -> None:
    data, vkey = made
    files = unpack(data)
    files["archive/data.warc.gz"] = _rewrite_payload(files["archive/data.warc.gz"])
    forged = repack(files)
    assert bundlecheck._check_warc(files["archive/data.warc.gz"])  # its digests are right
    report = verify_bundle(forged, vkey)
    assert not report.ok
    assert any("sha256" in (error or "") for _, error in report.citations), report.lines()


def test_a_proof_swapped_between_citations_is_caught(made: tuple[bytes, str]) -> None:
    data, vkey = made
    files = unpack(data)
    proofs = sorted(n for n in files if n.startswith("proofs/citation-") and n.endswith("proof"))
    files[proofs[0]], files[proofs[1]] = files[proofs[1]], files[proofs[0]]
    report = verify_bundle(repack(files), vkey)
    assert [error is not None for _, error in report.citations].count(True) == 2, report.lines()


def test_a_checkpoint_signed_with_another_key_is_caught(made: tuple[bytes, str]) -> None:
    data, vkey = made
    files = unpack(data)
    text, _ = split_note(files["proofs/checkpoint.txt"].decode())
    origin = Checkpoint.parse(text).origin
    forged_note = NoteSigner(origin, Ed25519PrivateKey.generate()).sign(text)
    files["proofs/checkpoint.txt"] = forged_note.encode()
    for name in [n for n in files if n.endswith(".tlog-proof")]:
        head = files[name].decode().partition("\n\n")[0]
        files[name] = (head + "\n\n" + forged_note).encode()
    report = verify_bundle(repack(files), vkey)
    assert report.bundle_error is not None and "signature" in report.bundle_error


def test_a_removed_citation_is_caught(made: tuple[bytes, str]) -> None:
    data, vkey = made
    files = unpack(data)
    lines = files["citations/citations.jsonl"].decode().splitlines(keepends=True)
    files["citations/citations.jsonl"] = "".join(lines[1:]).encode()
    report = verify_bundle(repack(files), vkey)
    assert report.bundle_error is not None and "one set" in report.bundle_error


def test_an_edited_datapackage_entry_is_caught(made: tuple[bytes, str]) -> None:
    data, vkey = made
    files = unpack(data)
    package = json.loads(files["datapackage.json"])
    package["resources"][0]["bytes"] += 1
    files["datapackage.json"] = json.dumps(package, indent=2, sort_keys=True).encode() + b"\n"
    assert_caught(canonical_zip(files, package["created"]), vkey, "an edited entry (old signature)")
    key = ec.generate_private_key(ec.SECP384R1())
    package["resources"][0]["hash"] = "sha256:" + "0" * 64
    files["datapackage.json"] = json.dumps(package, indent=2, sort_keys=True).encode() + b"\n"
    digest = "sha256:" + hashlib.sha256(files["datapackage.json"]).hexdigest()
    assert_caught(_resigned(files, digest, key, package), vkey, "an edited entry, re-signed")


def _resigned(
    files: dict[str, bytes], digest: str, key: ec.EllipticCurvePrivateKey, package: Any
) -> bytes:
    from cryptography.hazmat.primitives import serialization

    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    files = dict(files)
    files["datapackage-digest.json"] = digest_document(
        digest,
        sign_hash(key, digest),
        base64.b64encode(public).decode(),
        package["created"],
        package["software"],
    )
    return canonical_zip(files, package["created"])


def test_a_bundle_signed_by_another_key_fails_against_wacz_key(made: tuple[bytes, str]) -> None:
    from cryptography.hazmat.primitives import serialization

    data, vkey = made
    other = ec.generate_private_key(ec.SECP384R1())
    pem = other.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert verify_bundle(repack(unpack(data), other), vkey).ok  # well formed, evidence intact
    report = verify_bundle(data, vkey, wacz_key=pem)
    assert report.bundle_error is not None and "--wacz-key" in report.bundle_error


def test_a_timestamped_checkpoint_verifies_against_the_tsa_ca(
    tmp_path: Path, made: tuple[bytes, str]
) -> None:
    from fixtures_tsa import running_tsa

    (tmp_path / "tsa").mkdir()
    with running_tsa(tmp_path / "tsa") as tsa:
        stamped = settings_for(tmp_path / "amber-data").with_overrides(tsa_url=tsa.url)
        opened = Archive.open(stamped)
        try:
            populate(opened)
            evidence = opened.evidence_log()
            evidence.step(force=True)
            evidence.timestamp()
            data = export_bundle(opened, "default", "t-1").data
            vkey = evidence.signer.vkey()
        finally:
            opened.close()
        ca = tsa.ca_pem.read_bytes()
    assert "proofs/checkpoint.tsr" in unpack(data)
    report = verify_bundle(data, vkey, tsa_ca=ca)
    assert report.ok, report.lines()
    unstamped = verify_bundle(made[0], made[1], tsa_ca=ca)  # a bundle with no timestamp
    assert unstamped.bundle_error is not None and "timestamp" in unstamped.bundle_error


def test_an_erased_passage_is_exported_as_its_tombstone(tmp_path: Path) -> None:
    opened = Archive.open(settings_for(tmp_path / "amber-data"))
    try:
        populate(opened)
        before = export_bundle(opened, "default", "t-1")
        passage = next(
            i
            for i in before.mementos
            if opened.get_memento("default", i).scope.value == "passage"
            and opened.get_memento("default", i).uri_r == "https://example.org/policy"
        )
        opened.retention.erase("default", passage, "takedown", "admin-key")
        after = export_bundle(opened, "default", "t-1")
        vkey = opened.evidence_log().signer.vkey()
    finally:
        opened.close()
    report = verify_bundle(after.data, vkey)
    assert report.ok, report.lines()
    files = unpack(after.data)
    entries = [json.loads(line) for line in files["citations/citations.jsonl"].splitlines()]
    erased = [e for e in entries if e["passage_memento_id"] == passage]
    assert len(erased) == 2
    for entry in erased:
        [tombstoned] = [m for m in entry["mementos"] if m["id"] == passage]
        assert tombstoned["tombstone"]["deleted_at"] and tombstoned["warc_record_id"] is None
        assert entry["selectors"][0]["exact"] is None  # the quote went with the passage
    records = list(warcfile.read_records(files["archive/data.warc.gz"]))
    assert passage not in {r.get("Amber-Memento-Id") for r in records}
    assert f"proofs/tombstone-{passage}.statement.json" in files


def test_only_auditors_and_admins_may_export(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app
    from archive.access.keys import Role

    opened = Archive.open(settings_for(tmp_path / "amber-data"))
    try:
        populate(opened)
        keys = {role: opened.keys.create("default", role).key for role in Role}
        app = create_app(
            opened.settings.with_overrides(rate_limit_per_second=0), archive=opened, auth=True
        )
        with TestClient(app) as client:
            status = {
                role: client.get(
                    "/api/v1/transcripts/t-1/export",
                    headers={"Authorization": f"Bearer {key}"},
                ).status_code
                for role, key in keys.items()
            }
    finally:
        opened.close()
    assert status == {Role.AGENT: 403, Role.AUDITOR: 200, Role.ADMIN: 200}
