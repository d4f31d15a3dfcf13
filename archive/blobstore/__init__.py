"""Blob stores: immutable bytes addressed by their BLAKE3 hash.

Every backend implements :class:`~archive.blobstore.base.BlobStore` and passes the same test
suite. :func:`open_blob_store` picks one from a URL (``file:///…`` or ``s3://bucket/prefix``).
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from archive.blobstore.base import BlobStore, BlobStoreCapabilities, StoredBlob
from archive.config import Settings
from archive.exceptions import ConfigurationError

__all__ = ["BlobStore", "BlobStoreCapabilities", "StoredBlob", "open_blob_store"]


def open_blob_store(settings: Settings) -> BlobStore:
    url = settings.resolved_blob_store
    parts = urlsplit(url)
    if parts.scheme == "file":
        from archive.blobstore.local import LocalBlobStore

        return LocalBlobStore(unquote(parts.path), durable=settings.durable)
    if parts.scheme == "s3":
        from archive.blobstore.s3 import S3BlobStore

        if not parts.netloc:
            raise ConfigurationError("AMBER_BLOB_STORE s3:// URL needs a bucket name")
        return S3BlobStore.from_settings(
            bucket=parts.netloc, prefix=parts.path.strip("/"), settings=settings
        )
    raise ConfigurationError("AMBER_BLOB_STORE must be a file:// or s3:// URL")
