"""What every ``amber`` command shares: the settings, the archive opened for one command,
and how results are printed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from archive.archive import Archive
from archive.config import Settings
from archive.exceptions import AmberError
from archive.mementos import Memento


def load_settings() -> Settings:
    try:
        return Settings.from_env()
    except AmberError as error:
        raise click.ClickException(error.message) from None


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def memento_summary(memento: Memento, base_url: str) -> dict[str, Any]:
    """The API's view of a memento (api.mementos.memento_json), capture facts flattened and
    the capture headers and Memento links left out."""
    from api.mementos import memento_json
    from api.urls import Urls

    shown = memento_json(memento, Urls(base_url))
    capture = shown.pop("capture")
    for link in ("timegate", "timemap", "timemap_json"):
        del shown[link]
    return {
        **shown,
        "tool": capture["tool"],
        "final_url": capture["final_url"],
        "http_status": capture["http_status"],
    }


@contextmanager
def opened() -> Iterator[Archive]:
    """The archive for one command; library errors become clean CLI errors."""
    archive = Archive.open(load_settings())
    try:
        yield archive
    except AmberError as error:
        raise click.ClickException(error.message) from None
    finally:
        archive.close()


def minted_base_url(archive: Archive) -> str:
    """The base of this index's URI-Ms: the one the first server recorded, so that the CLI
    prints the same URI-M as every server. Recorded now if no server has started yet."""
    settled = archive.settle_base_url()
    if settled.recorded_now:
        click.echo(
            f"Recorded {settled.url} as the base of every URI-M of this index (no server "
            "had recorded one). To change it: amber config set-base-url URL",
            err=True,
        )
    return settled.url
