"""Audit bundles: a transcript's evidence as one WACZ 1.1.1 file (docs/design.md, "Audit
bundles"). :mod:`archive.bundles.export` builds it from the archive; the offline checker,
:mod:`archive.bundles.bundlecheck`, needs neither server nor index, so this package's
``__init__`` imports nothing."""
