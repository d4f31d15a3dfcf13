"""Everything the SDK raises, one hierarchy (the server's answer mapped by HTTP status)::

    AmberClientError                  anything the SDK raises; ``status`` and ``code`` when answered
    ├── AmberConnectionError          unreachable, or the answer was lost, after the retries
    ├── InvalidRequestError           400, or 422 for a request that does not match the schema
    │   └── CitationRejected          citations refused, nothing stored (``errors``, ``safe_text``)
    ├── AuthError                     401
    │   └── PermissionDeniedError     403
    ├── NotFoundError                 404
    ├── ConflictError                 409
    ├── PayloadTooLargeError          413
    ├── RateLimitedError              429 after the retries (``retry_after``)
    ├── ServiceUnavailableError       503 after the retries
    ├── ServerError                   any other 5xx
    └── EvidenceIntegrityError        bytes that do not hash to their address (checked here)

They are the SDK's own: it never imports the server's ``archive.exceptions``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from api.client.models import CitationError


class AmberClientError(Exception):
    """Anything the SDK raises. ``status`` (HTTP) and ``code`` (Amber's error code) are set
    when the server answered."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        detail: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.detail: Mapping[str, Any] = dict(detail or {})
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"HTTP {self.status} {self.code}: " if self.status is not None else ""
        return where + self.message


class AmberConnectionError(AmberClientError):
    """The server could not be reached (or the answer was lost), even after the retries."""


class InvalidRequestError(AmberClientError):
    """400, or 422 for a request that does not match the schema."""


class CitationRejected(InvalidRequestError):
    """One or more citations are invalid, and nothing was stored.

    ``errors`` holds one :class:`CitationError` per failed citation (``index`` into the
    citations as given; ``None`` for answer-level reasons such as ``no_citations``);
    ``safe_text`` is the degrade-mode rewrite of the answer when one was involved.
    """

    def __init__(
        self,
        message: str,
        errors: Sequence[CitationError],
        *,
        safe_text: str | None = None,
        status: int | None = None,
        code: str | None = "citations_rejected",
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, status=status, code=code, detail=detail)
        self.errors: tuple[CitationError, ...] = tuple(errors)
        self.safe_text = safe_text

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(e.reason for e in self.errors)

    def __str__(self) -> str:
        listed = "; ".join(e.describe() for e in self.errors)
        return f"{super().__str__()} ({listed})" if listed else super().__str__()


class AuthError(AmberClientError):
    """401: no key, or a key the server does not accept."""


class PermissionDeniedError(AuthError):
    """403: the key's role (or tenant) may not do this."""


class NotFoundError(AmberClientError):
    """404: no such transcript, memento or URI-R."""


class ConflictError(AmberClientError):
    """409: an Idempotency-Key reused for another request, other facts for one capture, or a
    retention that would be shortened."""


class PayloadTooLargeError(AmberClientError):
    """413."""


class RateLimitedError(AmberClientError):
    """429 after the retries; ``retry_after`` says when to come back."""


class ServiceUnavailableError(AmberClientError):
    """503 (storage unavailable) after the retries; ``retry_after`` when the server said."""


class ServerError(AmberClientError):
    """Any other 5xx."""


class EvidenceIntegrityError(AmberClientError):
    """Bytes do not hash to the address they are filed under (client-side check)."""
