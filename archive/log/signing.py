"""The log's Ed25519 signing key and C2SP signed notes.

The key is ``AMBER_LOG_SIGNING_KEY`` (base64 of the 32-byte Ed25519 seed) or, without it,
``<data dir>/log-signing-key``, generated on first start with mode 0600. Every replica
sharing an index must sign with the same key: give them the setting, or one data dir.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from archive.exceptions import ConfigurationError
from archive.log.proofcheck import ED25519_TYPE, SIGNATURE_PREFIX, key_id_of
from archive.secretfiles import read_or_create

KEY_FILE = "log-signing-key"


def load_signing_key(configured: str | None, data_dir: Path) -> Ed25519PrivateKey:
    if configured:
        try:
            seed = base64.b64decode(configured.strip(), validate=True)
        except binascii.Error:
            seed = b""
        if len(seed) != 32:
            raise ConfigurationError("AMBER_LOG_SIGNING_KEY must be base64 of a 32-byte seed")
        return Ed25519PrivateKey.from_private_bytes(seed)

    def fresh_seed() -> bytes:
        seed = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        return base64.b64encode(seed) + b"\n"

    text = read_or_create(data_dir / KEY_FILE, fresh_seed).decode("ascii").strip()
    return load_signing_key(text, data_dir)


@dataclass(frozen=True)
class NoteSigner:
    """Signs notes as ``name`` (the log's origin)."""

    name: str
    key: Ed25519PrivateKey

    @property
    def typed_public_key(self) -> bytes:
        raw = self.key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return ED25519_TYPE + raw

    @property
    def key_id(self) -> bytes:
        return key_id_of(self.name, self.typed_public_key)

    def vkey(self) -> str:
        """The verifier key, in signed-note format, to publish out of band."""
        encoded = base64.b64encode(self.typed_public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{encoded}"

    def sign(self, text: str) -> str:
        """``text`` (ending in a newline) as a signed note."""
        signature = self.key.sign(text.encode("utf-8"))
        encoded = base64.b64encode(self.key_id + signature).decode()
        return f"{text}\n{SIGNATURE_PREFIX}{self.name} {encoded}\n"


def origin_from(configured: str | None, base_url: str) -> str:
    """``AMBER_LOG_ORIGIN``, else the public base URL without its scheme (tlog-checkpoint
    recommends a schema-less URL), plus ``/log``."""
    origin = configured or base_url.split("://", 1)[-1].rstrip("/") + "/log"
    if not origin or any(c.isspace() or c == "+" or not c.isprintable() for c in origin):
        raise ConfigurationError("AMBER_LOG_ORIGIN must be printable, without spaces or '+'")
    return origin
