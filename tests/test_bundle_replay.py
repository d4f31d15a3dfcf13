"""pywb replays an audit bundle: a throwaway collection holding the bundle answers every
cited page at its capture time with the captured bytes.

pywb is not in the test extra: it pins ``cryptography`` below 48 (through pyOpenSSL), which
the lead decides on; without it installed this module is skipped, with it (a separate
virtualenv works: ``--system-site-packages`` then ``pip install pywb``) it runs."""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from archive.archive import Archive
from archive.bundles.export import export_bundle
from archive.bundles.warcfile import read_records

pytest.importorskip("pywb")

from test_bundles import populate, settings_for


@pytest.fixture()
def collection(tmp_path: Path) -> Iterator[tuple[Path, bytes]]:
    opened = Archive.open(settings_for(tmp_path / "amber-data"))
    try:
        populate(opened)
        data = export_bundle(opened, "default", "t-1").data
    finally:
        opened.close()
    bundle = tmp_path / "t-1.wacz"
    bundle.write_bytes(data)
    here = Path.cwd()
    os.chdir(tmp_path)  # pywb keeps its collections under the working directory
    try:
        from pywb.manager.manager import CollectionsManager

        manager = CollectionsManager("audit", must_exist=False)
        manager.add_collection()
        manager.add_archives([str(bundle)], unpack_wacz=True)  # pywb 2.10 reads WACZ so
        yield tmp_path, data
    finally:
        os.chdir(here)


def test_pywb_replays_every_cited_page_byte_for_byte(collection: tuple[Path, bytes]) -> None:
    from pywb.apps.frontendapp import FrontEndApp
    from werkzeug.test import Client

    root, _ = collection
    with zipfile.ZipFile(root / "t-1.wacz") as bundle:
        pages = [json.loads(line) for line in bundle.read("pages/pages.jsonl").splitlines()[1:]]
        records = list(read_records(bundle.read("archive/data.warc.gz")))
    # What a replay must give: the kept document where there is one (a passage of the same
    # URI-R and time is left out of the index), else the one memento at that time.
    captures = [r for r in records if r.get("Amber-Memento-Id")]
    captures.sort(key=lambda r: r.get("Amber-Scope") == "document")
    documents = {(r.get("WARC-Target-URI"), r.get("WARC-Date")): r.payload for r in captures}
    here = Path.cwd()
    os.chdir(root)
    try:
        client = Client(FrontEndApp())
        assert pages
        for page in pages:
            stamp = page["ts"].replace("-", "").replace(":", "").replace("T", "")[:14]
            replayed = client.get(f"/audit/{stamp}id_/{page['url']}")
            assert replayed.status_code == 200, (page["url"], replayed.status_code)
            assert replayed.get_data() == documents[(page["url"], page["ts"])], page["url"]
    finally:
        os.chdir(here)
