"""A local RFC 3161 time-stamping authority for tests: a throwaway CA and TSA certificate
made with openssl, and ``openssl ts -reply`` behind a small HTTP handler.

Its answers carry the TSA's certificate only (no ``certs`` option): openssl writes a set of
several certificates unsorted, which strict DER parsers (rfc3161-client) refuse."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


@dataclass(frozen=True)
class LocalTsa:
    url: str
    ca_pem: Path
    requests: list[bytes]


def _run(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True)


def _make_pki(root: Path) -> None:
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _run("req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
         "-subj", "/CN=Amber test CA", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign", cwd=root)  # fmt: skip
    _run("req", *curve, "-keyout", "tsa.key", "-out", "tsa.csr", "-subj", "/CN=Amber test TSA",
         cwd=root)  # fmt: skip
    (root / "ext.cnf").write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=critical,timeStamping\n"
    )
    _run("x509", "-req", "-in", "tsa.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "tsa.crt", "-days", "2", "-extfile", "ext.cnf",
         cwd=root)  # fmt: skip
    (root / "serial").write_text("01\n")
    (root / "tsa.cnf").write_text(
        "[ tsa ]\ndefault_tsa = amber\n[ amber ]\n"
        f"serial = {root}/serial\nsigner_cert = {root}/tsa.crt\n"
        f"signer_key = {root}/tsa.key\nsigner_digest = sha256\n"
        "default_policy = 1.2.3.4.1\ndigests = sha256\naccuracy = secs:1\n"
        "ess_cert_id_alg = sha256\n"
    )


@contextmanager
def running_tsa(root: Path) -> Iterator[LocalTsa]:
    """A TSA answering on a free local port, with its PKI made in ``root``."""
    _make_pki(root)
    seen: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            query = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append(query)
            answer = subprocess.run(
                [OPENSSL, "ts", "-reply", "-config", "tsa.cnf", "-queryfile", "/dev/stdin"],
                cwd=root,
                input=query,
                capture_output=True,
            )
            self.send_response(200 if answer.stdout else 500)
            self.send_header("Content-Type", "application/timestamp-reply")
            self.send_header("Content-Length", str(len(answer.stdout)))
            self.end_headers()
            self.wfile.write(answer.stdout)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield LocalTsa(f"http://127.0.0.1:{server.server_address[1]}/", root / "ca.crt", seen)
    server.shutdown()
    server.server_close()
