"""Citations at the moment they are made: evidence, quote verification, fail-closed.

- :mod:`~archive.citations.desk`: :class:`CitationDesk` checks each citation (evidence,
  evidence source, quote) and hands the valid ones to
  :mod:`~archive.citations.ledger`, which stores them (group commit) and reads them back.
- :mod:`~archive.citations.records`: the requests and records that cross the API.
- :mod:`~archive.citations.extract`: the named, versioned extractors (visible text of HTML,
  PDF and plain text); :mod:`~archive.citations.html_extractor` and
  :mod:`~archive.citations.charsets` hold the HTML walk and character decoding.
- :mod:`~archive.citations.normalise`: the frozen quote normalisations ``amber-norm-1`` and
  ``amber-norm-2`` (new citations); :mod:`~archive.citations.locate` finds a quote under one.
- :mod:`~archive.citations.transcripts`: :class:`TranscriptBook`, the records that cite and
  how long they stay auditable.

Specifications: ``docs/specs/amber-norm-1.md``, ``docs/specs/amber-norm-2.md`` and
``docs/specs/extractors.md``.
"""

from archive.citations.charsets import decode_html
from archive.citations.desk import CitationDesk
from archive.citations.extract import (
    EXTRACTORS,
    HTML_EXTRACTOR,
    HTML_EXTRACTOR_VERSION,
    PDF_EXTRACTOR,
    PDF_EXTRACTOR_VERSION,
    PLAIN_EXTRACTOR,
    PLAIN_EXTRACTOR_VERSION,
    ExtractedText,
    extract_text,
)
from archive.citations.html_extractor import html_to_text
from archive.citations.ledger import PASSAGE_MEDIA_TYPE
from archive.citations.locate import QuoteMatch, locate
from archive.citations.normalise import (
    NORMALISATION_VERSION,
    PreparedText,
    normalise,
    prepare,
    quote_hash,
)
from archive.citations.pdf_extractor import PDF_PAGE_SEPARATOR
from archive.citations.records import (
    Citation,
    CitationError,
    CitationRequest,
    CiteResult,
    QuoteRequest,
    Selector,
    SourceRequest,
)
from archive.citations.transcripts import (
    Transcript,
    TranscriptBook,
    TranscriptWrite,
    check_transcript_id,
    reached_mementos,
    resolve_retention,
)

__all__ = [
    "EXTRACTORS",
    "HTML_EXTRACTOR",
    "HTML_EXTRACTOR_VERSION",
    "NORMALISATION_VERSION",
    "PASSAGE_MEDIA_TYPE",
    "PDF_EXTRACTOR",
    "PDF_EXTRACTOR_VERSION",
    "PDF_PAGE_SEPARATOR",
    "PLAIN_EXTRACTOR",
    "PLAIN_EXTRACTOR_VERSION",
    "Citation",
    "CitationDesk",
    "CitationError",
    "CitationRequest",
    "CiteResult",
    "ExtractedText",
    "PreparedText",
    "QuoteMatch",
    "QuoteRequest",
    "Selector",
    "SourceRequest",
    "Transcript",
    "TranscriptBook",
    "TranscriptWrite",
    "check_transcript_id",
    "decode_html",
    "extract_text",
    "html_to_text",
    "locate",
    "normalise",
    "prepare",
    "quote_hash",
    "reached_mementos",
    "resolve_retention",
]
