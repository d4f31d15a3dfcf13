"""Every error Amber raises on purpose.

Verifiers raise; they never quietly return ``False``. The HTTP layer maps each class to one
status code (see ``api/errors.py``), so the hierarchy below is also the error contract::

    AmberError
    ├── InvalidInput                  the caller sent something we refuse (4xx, nothing stored)
    │   ├── InvalidURI                URI-R not absolute, unknown scheme, malformed
    │   ├── InvalidDatetime           not RFC 3339 / RFC 1123, or in the future
    │   ├── InvalidContent            bad base64, bad media type, empty where not allowed
    │   ├── InvalidAddress            not ``blake3:<64 lowercase hex>``
    │   ├── PayloadTooLarge           over a configured size limit
    │   ├── OverBudget                a JSON body over the request budget (422): too many
    │   │                             values, too deep, too many members, a long member name
    │   ├── EmptyQuote                the quote is empty, or only whitespace and invisible marks
    │   ├── QuoteNotFound             not in the document's text, exactly or normalised
    │   ├── QuoteTooCommon            in the text more often than locating may compare
    │   ├── ExtractionLimitExceeded   reading a document's text broke a limit (``limit``)
    │   └── CitationsRejected         invalid citations, fail-closed: nothing stored (``errors``)
    ├── NotFound                      nothing there (or nothing this caller may see)
    │   ├── MementoNotFound
    │   ├── BlobNotFound
    │   ├── OriginalNotFound          no memento of this URI-R
    │   ├── TranscriptNotFound
    │   ├── CitationNotFound          no citation with this id (drift history)
    │   └── NotYetCheckpointed        its log leaf is not in a signed checkpoint yet (seconds)
    ├── Unauthenticated               no key, a malformed, unknown or revoked key
    ├── Forbidden                     a valid key whose role may not do this
    ├── RateLimited                   the key's token bucket is empty (``retry_after``)
    ├── Gone                          it existed and was deleted on schedule or erased (410)
    ├── RetentionConflict             a retention change refused (legal hold, shortening)
    ├── RetentionShortened            shortening a transcript's retention outside the admin action
    ├── IdempotencyConflict           an Idempotency-Key reused for a different request
    ├── IntegrityError                stored bytes no longer hash to their address: never served
    │   └── LogMismatch               the evidence log and the archive disagree (amber log verify)
    ├── StorageError                  a backend failed after bounded retries; nothing acknowledged
    │   └── RetentionLocked           the store refuses a delete: Object Lock retention or hold
    ├── FetchError                    an outbound fetch did not produce a document
    │   ├── FetchRefused              the fetch guard refused the destination
    │   └── FetchTooLarge             the response exceeded the size cap
    └── ConfigurationError            settings that cannot work together
        └── BaseUrlMismatch           AMBER_PUBLIC_BASE_URL differs from the one the index recorded
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class RefusedCitation(Protocol):
    """One refused citation of a request, as :class:`CitationsRejected` reports it (the
    citations package's ``CitationError``): errors import nothing of the library."""

    @property
    def index(self) -> int: ...

    @property
    def reason(self) -> str: ...

    @property
    def detail(self) -> str: ...


class AmberError(Exception):
    """Base class. ``code`` is a stable machine-readable token for clients."""

    code = "amber_error"

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class InvalidInput(AmberError):
    code = "invalid_input"


class InvalidURI(InvalidInput):
    code = "invalid_uri"


class InvalidDatetime(InvalidInput):
    code = "invalid_datetime"


class InvalidContent(InvalidInput):
    code = "invalid_content"


class InvalidAddress(InvalidInput):
    code = "invalid_address"


class PayloadTooLarge(InvalidInput):
    code = "payload_too_large"


class OverBudget(InvalidInput):
    """A JSON request body breaks a bound of the request budget (``archive.budget``).

    ``detail`` names the bound: ``limit`` (e.g. ``max_json_nodes``), its ``setting``
    (``AMBER_MAX_JSON_NODES``), its ``max`` and the JSONPath ``path`` where it broke.
    """

    code = "over_budget"


class EmptyQuote(InvalidInput):
    code = "empty_quote"


class QuoteNotFound(InvalidInput):
    code = "quote_not_found"


class QuoteTooCommon(InvalidInput):
    """The quote occurs in the document's text more often than ``[citations]
    max_quote_occurrences``: it names no one passage, and choosing among that many by
    context would cost the request more than any citation may."""

    code = "quote_too_common"


class ExtractionLimitExceeded(InvalidInput):
    """Extracting a document's text broke one of the extraction limits (``docs/design.md``,
    "Extraction limits"): ``limit`` names which — ``time``, ``memory``, ``pages`` or
    ``text`` — and ``maximum`` its configured value (seconds, MiB, pages, characters)."""

    code = "extraction_limit"

    def __init__(self, limit: str, maximum: float, message: str) -> None:
        super().__init__(message, limit=limit, maximum=maximum)
        self.limit = limit
        self.maximum = maximum


class CitationsRejected(InvalidInput):
    """At least one citation is invalid and the request is fail-closed (or none is valid)."""

    code = "citations_rejected"

    def __init__(self, errors: Sequence[RefusedCitation]) -> None:
        super().__init__(f"{len(errors)} citation(s) rejected; nothing was stored")
        self.errors = list(errors)


class NotFound(AmberError):
    code = "not_found"


class MementoNotFound(NotFound):
    code = "memento_not_found"


class BlobNotFound(NotFound):
    code = "blob_not_found"


class OriginalNotFound(NotFound):
    code = "original_not_found"


class TranscriptNotFound(NotFound):
    code = "transcript_not_found"


class CitationNotFound(NotFound):
    code = "citation_not_found"


class NotYetCheckpointed(NotFound):
    """The record's leaf is sequenced but not yet in a signed checkpoint (seconds)."""

    code = "not_yet_checkpointed"


class Unauthenticated(AmberError):
    code = "unauthenticated"


class Forbidden(AmberError):
    code = "forbidden"


class RateLimited(AmberError):
    code = "rate_limited"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message, retry_after_seconds=round(retry_after, 3))
        self.retry_after = retry_after


class Gone(AmberError):
    code = "gone"


class RetentionConflict(AmberError):
    code = "retention_conflict"


class RetentionShortened(AmberError):
    """Shortening retention is refused here (an admin action with a reason, elsewhere)."""

    code = "retention_shortened"


class IdempotencyConflict(AmberError):
    code = "idempotency_conflict"


class IntegrityError(AmberError):
    code = "integrity_error"


class LogMismatch(IntegrityError):
    """The evidence log and the archive disagree; the message names the first place."""

    code = "log_mismatch"


class StorageError(AmberError):
    code = "storage_unavailable"


class RetentionLocked(StorageError):
    """The store (S3 Object Lock) refused to delete a version: retention or legal hold.

    For the retention sweep this means "not yet" (its clock may run ahead of the store's):
    retry later. For an erasure under COMPLIANCE it means "impossible until the date".
    """

    code = "retention_locked"


class FetchError(AmberError):
    code = "fetch_failed"


class FetchRefused(FetchError):
    code = "fetch_refused"


class FetchTooLarge(FetchError):
    code = "fetch_too_large"


class ConfigurationError(AmberError):
    code = "configuration_error"


class BaseUrlMismatch(ConfigurationError):
    """The configured public base URL is not the one the index recorded: URI-Ms are
    permanent, so a process refuses to mint them under another base until told to move."""

    code = "base_url_mismatch"
