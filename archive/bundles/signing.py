"""The audit bundle's datapackage signing key: ECDSA P-384, as WACZ signing wants.

Kept apart from the export so that the CLI (``amber export --print-key``) and tests reach the
key without the exporter, and so the key's one home is plain to see.
"""

from __future__ import annotations

import base64
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from archive.secretfiles import read_or_create

KEY_FILE = "wacz-signing-key.pem"


def load_wacz_key(data_dir: Path) -> ec.EllipticCurvePrivateKey:
    """The bundle signing key, generated on first use beside the log key (PEM, mode 0600)."""

    def fresh_pem() -> bytes:
        return ec.generate_private_key(ec.SECP384R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    pem = read_or_create(data_dir / KEY_FILE, fresh_pem)
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def public_key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )


def sign_hash(key: ec.EllipticCurvePrivateKey, hash_text: str) -> str:
    """WACZ anonymous signing: raw r‖s (what WebCrypto gives) over the hash string."""
    der = key.sign(hash_text.encode("utf-8"), ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
    r, s = decode_dss_signature(der)
    return base64.b64encode(r.to_bytes(48, "big") + s.to_bytes(48, "big")).decode()
