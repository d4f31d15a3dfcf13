"""The library's public surface: what ``from archive import …`` offers is a deliberate list,
held here so that adding or dropping a name is a visible change (as httpx does)."""

from __future__ import annotations

import inspect

import archive
from archive.exceptions import AmberError

PUBLIC = [
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


def test_all_is_the_documented_list() -> None:
    assert archive.__all__ == PUBLIC


def _written_docstring(cls: type) -> bool:
    """A docstring someone wrote (a dataclass without one gets its signature instead)."""
    doc = cls.__dict__.get("__doc__") or ""
    return bool(doc.strip()) and not doc.startswith(f"{cls.__name__}(")


def test_every_public_class_but_the_errors_has_a_docstring() -> None:
    # The errors are documented together, in the drawing atop archive/exceptions.py.
    undocumented = [
        name
        for name in archive.__all__
        if inspect.isclass(value := getattr(archive, name))
        and not issubclass(value, AmberError)
        and not _written_docstring(value)
    ]
    assert undocumented == []


def test_every_error_class_is_public() -> None:
    from archive import exceptions

    errors = {
        name
        for name, value in vars(exceptions).items()
        if inspect.isclass(value) and issubclass(value, AmberError)
    }
    assert errors <= set(archive.__all__)


def test_public_names_come_from_their_home_modules() -> None:
    # The package re-exports; it defines nothing of its own but the version.
    for name in archive.__all__:
        value = getattr(archive, name)
        if inspect.isclass(value):
            assert value.__module__.startswith("archive."), name
