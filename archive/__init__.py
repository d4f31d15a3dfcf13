"""Amber: a content-addressed snapshot archive speaking the Memento protocol (RFC 7089).

The library does all the work; ``api`` (HTTP) and the CLI only parse, call and render.
Start from :class:`Archive`, opened from :class:`Settings`::

    from archive import Archive, MementoRequest, Settings

    archive = Archive.open(Settings.from_env())
    written = archive.write_memento(
        MementoRequest(uri_r="https://example.org/", content=b"...", content_type="text/html")
    )

The names below are the public surface; everything else may move between releases.
"""

from archive.access import IssuedKey, KeyInfo, Principal, Role
from archive.archive import Archive, TimeMapPage
from archive.citations import (
    Citation,
    CitationError,
    CitationRequest,
    CiteResult,
    QuoteRequest,
    Selector,
    SourceRequest,
    Transcript,
    TranscriptWrite,
)
from archive.config import CitationPolicy, DriftPolicy, ExtractionLimits, Settings
from archive.drift import CheckRecord, CitationDrift, Review, RunSummary, SourceRate
from archive.exceptions import (
    AmberError,
    BaseUrlMismatch,
    BlobNotFound,
    CitationNotFound,
    CitationsRejected,
    ConfigurationError,
    EmptyQuote,
    ExtractionLimitExceeded,
    FetchError,
    FetchRefused,
    FetchTooLarge,
    Forbidden,
    Gone,
    IdempotencyConflict,
    IntegrityError,
    InvalidAddress,
    InvalidContent,
    InvalidDatetime,
    InvalidInput,
    InvalidURI,
    LogMismatch,
    MementoNotFound,
    NotFound,
    NotYetCheckpointed,
    OriginalNotFound,
    OverBudget,
    PayloadTooLarge,
    QuoteNotFound,
    QuoteTooCommon,
    RateLimited,
    RetentionConflict,
    RetentionLocked,
    RetentionShortened,
    StorageError,
    TranscriptNotFound,
    Unauthenticated,
)
from archive.index import Neighbours
from archive.mementos import CaptureFacts, Memento, Scope
from archive.retention import SweepReport
from archive.writes import MementoRequest, WriteResult

__version__ = "0.1.0"

__all__ = [
    "AmberError",
    "Archive",
    "BaseUrlMismatch",
    "BlobNotFound",
    "CaptureFacts",
    "CheckRecord",
    "Citation",
    "CitationDrift",
    "CitationError",
    "CitationNotFound",
    "CitationPolicy",
    "CitationRequest",
    "CitationsRejected",
    "CiteResult",
    "ConfigurationError",
    "DriftPolicy",
    "EmptyQuote",
    "ExtractionLimitExceeded",
    "ExtractionLimits",
    "FetchError",
    "FetchRefused",
    "FetchTooLarge",
    "Forbidden",
    "Gone",
    "IdempotencyConflict",
    "IntegrityError",
    "InvalidAddress",
    "InvalidContent",
    "InvalidDatetime",
    "InvalidInput",
    "InvalidURI",
    "IssuedKey",
    "KeyInfo",
    "LogMismatch",
    "Memento",
    "MementoNotFound",
    "MementoRequest",
    "Neighbours",
    "NotFound",
    "NotYetCheckpointed",
    "OriginalNotFound",
    "OverBudget",
    "PayloadTooLarge",
    "Principal",
    "QuoteNotFound",
    "QuoteRequest",
    "QuoteTooCommon",
    "RateLimited",
    "RetentionConflict",
    "RetentionLocked",
    "RetentionShortened",
    "Review",
    "Role",
    "RunSummary",
    "Scope",
    "Selector",
    "Settings",
    "SourceRate",
    "SourceRequest",
    "StorageError",
    "SweepReport",
    "TimeMapPage",
    "Transcript",
    "TranscriptNotFound",
    "TranscriptWrite",
    "Unauthenticated",
    "WriteResult",
    "__version__",
]
