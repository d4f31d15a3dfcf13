"""Every error Amber raises on purpose lives in archive/exceptions.py, and its docstring's
hierarchy drawing names each one: a reader finds the whole error contract in one place."""

from __future__ import annotations

import importlib
import pkgutil

import archive
from archive import exceptions
from archive.exceptions import AmberError


def _all_subclasses(cls: type) -> set[type]:
    """Subclasses defined by the library (tests define their own, to raise on purpose)."""
    found: set[type] = set()
    for sub in cls.__subclasses__():
        found |= _all_subclasses(sub)
        if sub.__module__.startswith("archive."):
            found.add(sub)
    return found


def _import_every_module() -> None:
    for module in pkgutil.walk_packages(archive.__path__, prefix="archive."):
        importlib.import_module(module.name)


def test_every_amber_error_is_defined_in_the_exceptions_module() -> None:
    _import_every_module()
    elsewhere = sorted(
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _all_subclasses(AmberError)
        if cls.__module__ != "archive.exceptions"
    )
    assert elsewhere == []


def test_the_hierarchy_drawing_names_every_error() -> None:
    drawing = exceptions.__doc__ or ""
    defined = {cls.__name__ for cls in _all_subclasses(AmberError) | {AmberError}}
    assert sorted(name for name in defined if name not in drawing) == []
