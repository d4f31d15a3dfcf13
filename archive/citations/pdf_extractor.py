"""The ``amber-pdf`` extractor: each page's text as PDFium lays it out.

Pages are joined by :data:`PDF_PAGE_SEPARATOR`, line breaks become ``\\n`` and PDFium's
end-of-line hyphenation marker becomes ``-\\n`` (``docs/specs/extractors.md``). The page and
text limits are checked here, as the document is read, so a PDF over them costs no more
than reaching the limit; time and memory are bounded by the worker process this runs in
(:mod:`archive.citations.sandbox`). Any change to what this produces must bump the PDF rules
number in :mod:`archive.citations.extract`.
"""

from __future__ import annotations

import re
import threading

import pypdfium2

from archive.exceptions import ExtractionLimitExceeded, InvalidContent

PDF_PAGE_SEPARATOR = "\n\f\n"

_pdfium_lock = threading.Lock()  # PDFium is not thread-safe
_PDF_LINE_BREAKS = re.compile(r"\r\n?")


def pdf_text(content: bytes, *, max_pages: int | None = None, max_chars: int | None = None) -> str:
    """Each page's text, pages joined by :data:`PDF_PAGE_SEPARATOR`.

    Raises :class:`InvalidContent` for a file PDFium cannot read, and
    :class:`ExtractionLimitExceeded` (``pages`` or ``text``) when the document has more than
    ``max_pages`` pages or its text more than ``max_chars`` characters.
    """
    pages: list[str] = []
    with _pdfium_lock:
        try:
            document = pypdfium2.PdfDocument(content)
        except pypdfium2.PdfiumError as error:
            raise InvalidContent(f"cannot read PDF: {error}") from None
        try:
            count = len(document)
            if max_pages is not None and count > max_pages:
                raise ExtractionLimitExceeded(
                    "pages", max_pages, f"the PDF has {count} pages; at most {max_pages} are read"
                )
            least = -len(PDF_PAGE_SEPARATOR)  # a lower bound of the final text's length
            for index in range(count):
                page = _page_text(document, index)
                pages.append(page)
                least += len(page) - page.count("\r") + len(PDF_PAGE_SEPARATOR)
                if max_chars is not None and least > max_chars:
                    raise _too_much_text(max_chars)
        except pypdfium2.PdfiumError as error:
            raise InvalidContent(f"cannot read PDF: {error}") from None
        finally:
            document.close()
    text = PDF_PAGE_SEPARATOR.join(pages)
    text = _PDF_LINE_BREAKS.sub("\n", text)
    # PDFium's marker for a hyphen it took for line-end hyphenation (line break dropped).
    text = text.replace("\x02", "-\n").replace("\ufffe", "-\n")
    if max_chars is not None and len(text) > max_chars:  # a marker grows by one character
        raise _too_much_text(max_chars)
    return text


def _page_text(document: pypdfium2.PdfDocument, index: int) -> str:
    page = document[index]
    try:
        textpage = page.get_textpage()
        try:
            text: str = textpage.get_text_bounded()
            return text
        finally:
            textpage.close()
    finally:
        page.close()


def _too_much_text(max_chars: int) -> ExtractionLimitExceeded:
    return ExtractionLimitExceeded(
        "text", max_chars, f"the extracted text is longer than {max_chars} characters"
    )
