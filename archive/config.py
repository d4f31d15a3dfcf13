"""All configuration, in one place (twelve-factor: environment first).

Sources, lowest precedence first: built-in defaults, a TOML file named by ``AMBER_CONFIG``
(top-level keys are the setting names below, lower case, without the ``AMBER_`` prefix),
then ``AMBER_*`` environment variables. ``Settings`` is frozen: build a new one to change it.
Secrets (credentials inside URLs) are masked by :meth:`Settings.describe`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from archive.exceptions import ConfigurationError

ENV_PREFIX = "AMBER_"
# S3 Object Lock retention modes (``AMBER_S3_OBJECT_LOCK_MODE``).
OBJECT_LOCK_MODES = ("GOVERNANCE", "COMPLIANCE")
# The S3 data paths (``AMBER_S3_CLIENT``): archive/blobstore/s3_lean.py, or boto3 for all.
S3_CLIENTS = ("lean", "botocore")


@dataclass(frozen=True)
class CitationPolicy:
    """The ``[citations]`` section: what counts as evidence, how it is checked, how long it lives.

    - ``required``: an answer with no valid citation is refused (or degraded) by the SDK.
    - ``evidence_sources``: tools whose output counts as evidence.
    - ``allow_search_results_as_evidence``: let ``search.*`` results count (default never).
    - ``fail_closed``: one invalid citation rejects the whole request, storing nothing.
    - ``attach_snapshot_hash``: rendered citations carry passage and quote hashes.
    - ``retention_days``: grace period for evidence no transcript cites.
    - ``keep_document``: also keep the whole cited document as a memento.
    - ``context_chars``: context kept on each side of a quote in the passage memento.
    - ``max_quote_chars`` / ``max_citations_per_request``: input limits.
    - ``max_quote_occurrences``: occurrences of one quote in its document that locating
      compares (exactly or normalised); a quote found more often is refused
      (``quote_too_common``). What bounds locating's work besides the text's length.
    - ``policies``: named retention policies → ISO 8601 durations (``default`` = grace).
    """

    required: bool = True
    evidence_sources: tuple[str, ...] = ("http.get", "kb.read")
    allow_search_results_as_evidence: bool = False
    fail_closed: bool = True
    attach_snapshot_hash: bool = True
    retention_days: int = 14
    keep_document: bool = False
    context_chars: int = 200
    max_quote_chars: int = 4000
    max_citations_per_request: int = 100
    max_quote_occurrences: int = 10_000
    policies: Mapping[str, str] = field(default_factory=lambda: {"regulated": "P7Y"})

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> CitationPolicy:
        known = {f.name for f in fields(cls)}
        unknown = set(section) - known
        if unknown:
            raise ConfigurationError(f"unknown [citations] keys: {', '.join(sorted(unknown))}")
        values = dict(section)
        if "evidence_sources" in values:
            values["evidence_sources"] = tuple(values["evidence_sources"])
        policy = cls(**values)
        if (
            policy.context_chars < 0
            or policy.max_quote_chars < 1
            or policy.retention_days < 0
            or policy.max_quote_occurrences < 1
        ):
            raise ConfigurationError("[citations] limits must be positive")
        return policy

    def tool_is_evidence(self, tool: str | None) -> bool:
        if tool is None:
            return False
        if tool.startswith("search.") or tool == "search":
            return self.allow_search_results_as_evidence
        return tool in self.evidence_sources


@dataclass(frozen=True)
class DriftPolicy:
    """The ``[drift]`` section of the config file (the verdicts: ``docs/specs/amber-drift-1.md``).

    - ``interval_hours``: a citation is checked again this long after its last check.
    - ``stable_interval_hours`` / ``stable_after``: after ``stable_after`` consecutive
      ``identical``/``cosmetic`` checks a source counts as stable and is checked this often.
    - ``retry_hours``: an ``unreachable`` check (inconclusive) is retried this soon.
    - ``concurrency``: fetches in flight per run; ``host_concurrency`` per host, each host's
      requests at least ``host_delay_seconds`` apart; ``timeout_seconds`` per fetch.
    - ``review_on``: verdicts that set ``needs_review`` on the citing transcript.
    - ``window_days``: the window drift rates per source host are computed over.
    - ``soft_404_probe``: probe a random sibling URL once per host and run.
    """

    interval_hours: float = 24.0
    stable_interval_hours: float = 24.0 * 7
    stable_after: int = 3
    retry_hours: float = 6.0
    concurrency: int = 16
    host_concurrency: int = 2
    host_delay_seconds: float = 0.5
    timeout_seconds: float = 20.0
    review_on: tuple[str, ...] = ("reversal",)
    window_days: int = 90
    soft_404_probe: bool = True

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> DriftPolicy:
        known = {f.name for f in fields(cls)}
        unknown = set(section) - known
        if unknown:
            raise ConfigurationError(f"unknown [drift] keys: {', '.join(sorted(unknown))}")
        values = dict(section)
        if "review_on" in values:
            values["review_on"] = tuple(values["review_on"])
        policy = cls(**values)
        allowed = {"material", "reversal", "gone", "soft_404"}
        if not set(policy.review_on) <= allowed:
            raise ConfigurationError(f"[drift] review_on takes {', '.join(sorted(allowed))}")
        if (
            min(policy.interval_hours, policy.stable_interval_hours, policy.retry_hours) <= 0
            or policy.timeout_seconds <= 0
            or policy.host_delay_seconds < 0
            or policy.concurrency < 1
            or policy.host_concurrency < 1
            or policy.stable_after < 1
            or policy.window_days < 1
        ):
            raise ConfigurationError("[drift] intervals, limits and the window must be positive")
        return policy


@dataclass(frozen=True)
class ExtractionLimits:
    """What extracting one document's text may cost (``docs/design.md``, "Extraction limits").

    HTML and PDF are read in worker processes (:mod:`archive.citations.sandbox`); breaking a
    limit raises :class:`~archive.exceptions.ExtractionLimitExceeded` naming it.

    - ``workers``: extraction worker processes (0: one per CPU, at most 4).
    - ``timeout_seconds``: wall-clock (and CPU) time one extraction may take.
    - ``request_seconds``: extraction time all documents of one request may take together.
    - ``memory_mb``: address space of a worker process (interpreter included).
    - ``max_pages``: pages of a PDF.
    - ``max_text_chars``: characters of extracted text, for every extractor.
    """

    workers: int = 0
    timeout_seconds: float = 10.0
    request_seconds: float = 30.0
    memory_mb: int = 1024
    max_pages: int = 2000
    max_text_chars: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if (
            self.workers < 0
            or min(self.timeout_seconds, self.request_seconds) <= 0
            or min(self.memory_mb, self.max_pages, self.max_text_chars) < 1
        ):
            raise ConfigurationError(
                "AMBER_EXTRACT_* limits must be positive (AMBER_EXTRACT_WORKERS: 0 = auto)"
            )

    @property
    def pool_size(self) -> int:
        """Worker processes to run: ``workers``, or one per CPU (at most 4) when 0."""
        return self.workers or max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class Settings:
    """Every setting, read once from ``AMBER_*`` environment variables and an optional
    config file (:meth:`from_env`); :meth:`describe` shows them with secrets masked."""

    data_dir: Path = Path("amber-data")
    database_url: str = ""  # default: sqlite file inside data_dir
    blob_store: str = ""  # default: file:// directory inside data_dir
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    # The base of every URI-M. Recorded in the index by the first server (or CLI command
    # that prints a URI-M): then every process uses the recorded one (archive/base_url.py).
    public_base_url: str | None = None  # default: the address the first server listens on
    # Private hosts/addresses/CIDRs the fetcher may reach: "host" opens ports 80 and 443,
    # "host:8080" that port, "host:*" every port; IPv6 with a port in brackets.
    fetch_allow: tuple[str, ...] = ()
    internal_schemes: tuple[str, ...] = ("kb",)
    max_body_bytes: int = 32 * 1024 * 1024
    # The request budget of a JSON body (archive/budget.py, docs/design.md §9.3): values in
    # all, levels of nesting, members of any one object or items of any one array, bytes of
    # a member name as written. Over one: 422 over_budget, before the body is parsed.
    max_json_nodes: int = 20_000
    max_json_depth: int = 32
    max_json_members: int = 1_000
    max_json_key_bytes: int = 1_024
    # Validation problems listed in one 422 answer; the rest are counted, not listed.
    max_error_items: int = 20
    timemap_page_size: int = 1000
    # "full": fsync every blob and its directory, SQLite synchronous=FULL. "relaxed" exists
    # only so the benchmark can show what durability costs; never run production on it.
    durability: str = "full"
    fetch_timeout_seconds: float = 20.0
    fetch_max_bytes: int = 20 * 1024 * 1024
    fetch_max_redirects: int = 10
    user_agent: str = "Amber/0.1 (+citation archive; Memento RFC 7089)"
    # How long an Idempotency-Key's first answer is replayed; then the key is free again.
    idempotency_ttl_hours: int = 24
    key_secret: str | None = None  # HMAC key for API keys; default: <data_dir>/key-secret
    rate_limit_per_second: float = 100.0  # per API key; 0 turns the limit off
    rate_limit_burst: int = 200
    # Browser sessions (/ui): signed out after this long without a request, and after this
    # long in all however busy; sign-in attempts allowed per client address per minute.
    session_idle_minutes: float = 30.0
    session_max_hours: float = 12.0
    login_attempts_per_minute: int = 10
    # Memory (MiB) each server process gives to remembering live mementos' URI-M answers
    # (~1.5 KB each: 64 MiB holds ~40,000). 0: every answer reads the index.
    uri_m_cache_mb: int = 64
    # Memory (MiB) each server process gives to remembering TimeMaps and TimeGate answers
    # (URI-Rs' mementos in TimeMap order, rendered pages and Link headers), until the next
    # memento written or deleted in any process. 0: every answer reads the index.
    timemap_cache_mb: int = 32
    # Memory (MiB) each server process gives to remembering the bytes of live mementos read
    # from a remote blob store (S3), re-hashed before each answer, until the next deletion
    # in any process. 0: every answer reads the store. A local store is always read.
    blob_cache_mb: int = 64
    s3_sse: str | None = None  # "AES256" (SSE-S3) or "aws:kms" (SSE-KMS)
    s3_sse_kms_key_id: str | None = None
    # S3 Object Lock mode for blob retention (the bucket must have Object Lock enabled):
    # "GOVERNANCE" (an admin may erase, with BypassGovernanceRetention) or "COMPLIANCE"
    # (nobody may delete before the date). None: Amber sets no storage-level lock.
    s3_object_lock_mode: str | None = None
    # How blobs are put, read and checked on S3: "lean" (archive/blobstore/s3_lean.py: a
    # SigV4-signed urllib3 request, no botocore on the hot path) or "botocore" (boto3 for
    # every call). Bucket setup, retention, deletes and listing always use boto3.
    s3_client: str = "lean"
    # Extraction limits (ExtractionLimits; docs/design.md, "Extraction limits").
    extract_workers: int = 0  # 0: one worker process per CPU, at most 4
    extract_timeout_seconds: float = 10.0
    extract_request_seconds: float = 30.0
    extract_memory_mb: int = 1024
    extract_max_pages: int = 2000
    extract_max_text_chars: int = 8 * 1024 * 1024
    # The evidence log (archive/log, docs/design.md "The evidence log"): "on" sequences a
    # signed Merkle-log leaf with every memento, citation and tombstone; "off" only exists
    # so the benchmark can show what the log costs.
    evidence_log: str = "on"
    log_origin: str | None = None  # default: the public base URL without scheme, + "/log"
    log_signing_key: str | None = None  # base64 Ed25519 seed; default <data_dir>/log-signing-key
    log_checkpoint_interval: float = 1.0  # seconds between signed checkpoints, at least
    tsa_url: str | None = None  # RFC 3161 time-stamping authority; None: no timestamps
    tsa_interval: float = 3600.0  # seconds between timestamps while the tree grows, at least
    # `amber mcp` (api/mcp): the Amber server its tools call (AMBER_URL) with AMBER_API_KEY;
    # no URL: the embedded archive, opened in that process. Text a tool returns is cut at
    # mcp_text_limit characters (the full length is reported).
    url: str | None = None
    api_key: str | None = None
    mcp_text_limit: int = 20_000
    # Several workers on one host (`amber serve --workers N` sets it): where each publishes
    # its /metrics figures for the others (archive/workermetrics.py), every so many seconds.
    metrics_dir: str | None = None
    metrics_publish_seconds: float = 1.0
    # Disk (MiB) each server process gives to remembering blob bytes read from a remote store
    # (archive/blobstore/diskcache.py), re-hashed before use; 0: off. Never for a local store.
    blob_disk_cache_mb: int = 0
    blob_disk_cache_dir: str | None = None  # default: <data_dir>/blob-cache
    extra: Mapping[str, Any] = field(default_factory=dict)  # sections later features read

    def __post_init__(self) -> None:
        if self.evidence_log not in ("on", "off"):
            raise ConfigurationError("AMBER_EVIDENCE_LOG must be 'on' or 'off'")
        if self.log_checkpoint_interval <= 0 or self.tsa_interval <= 0:
            raise ConfigurationError("AMBER_LOG_CHECKPOINT_INTERVAL and AMBER_TSA_INTERVAL > 0")
        if self.durability not in ("full", "relaxed"):
            raise ConfigurationError("AMBER_DURABILITY must be 'full' or 'relaxed'")
        if self.max_body_bytes <= 0 or self.timemap_page_size <= 0 or self.mcp_text_limit <= 0:
            raise ConfigurationError("size limits must be positive")
        budget = (
            self.max_json_nodes,
            self.max_json_depth,
            self.max_json_members,
            self.max_json_key_bytes,
            self.max_error_items,
        )
        if min(budget) < 1:
            raise ConfigurationError("AMBER_MAX_JSON_* and AMBER_MAX_ERROR_ITEMS must be 1 or more")
        for entry in self.fetch_allow:
            _validate_allow_entry(entry)
        if self.s3_sse not in (None, "AES256", "aws:kms"):
            raise ConfigurationError("AMBER_S3_SSE must be 'AES256' or 'aws:kms'")
        if self.s3_sse_kms_key_id and self.s3_sse != "aws:kms":
            raise ConfigurationError("AMBER_S3_SSE_KMS_KEY_ID needs AMBER_S3_SSE=aws:kms")
        if self.s3_client not in S3_CLIENTS:
            raise ConfigurationError("AMBER_S3_CLIENT must be 'lean' or 'botocore'")
        if self.s3_object_lock_mode is not None:
            mode = self.s3_object_lock_mode.strip().upper()
            if mode not in OBJECT_LOCK_MODES:
                raise ConfigurationError(
                    "AMBER_S3_OBJECT_LOCK_MODE must be 'GOVERNANCE' or 'COMPLIANCE'"
                )
            object.__setattr__(self, "s3_object_lock_mode", mode)  # normalised spelling
            if not self.blob_store.startswith("s3://"):
                raise ConfigurationError(
                    "AMBER_S3_OBJECT_LOCK_MODE needs an s3:// AMBER_BLOB_STORE"
                )
        CitationPolicy.from_section(self.extra.get("citations", {}))  # fail at start, not later
        DriftPolicy.from_section(self.extra.get("drift", {}))
        if self.rate_limit_per_second < 0 or self.rate_limit_burst < 1:
            raise ConfigurationError("rate limits must be non-negative (0 = off), burst >= 1")
        if self.session_idle_minutes <= 0 or self.session_max_hours <= 0:
            raise ConfigurationError("AMBER_SESSION_IDLE_MINUTES and _MAX_HOURS must be positive")
        if self.login_attempts_per_minute < 1:
            raise ConfigurationError("AMBER_LOGIN_ATTEMPTS_PER_MINUTE must be 1 or more")
        if self.idempotency_ttl_hours < 1:
            raise ConfigurationError("AMBER_IDEMPOTENCY_TTL_HOURS must be 1 or more")
        if self.uri_m_cache_mb < 0:
            raise ConfigurationError("AMBER_URI_M_CACHE_MB must be 0 (off) or more")
        if self.timemap_cache_mb < 0:
            raise ConfigurationError("AMBER_TIMEMAP_CACHE_MB must be 0 (off) or more")
        if self.blob_cache_mb < 0:
            raise ConfigurationError("AMBER_BLOB_CACHE_MB must be 0 (off) or more")
        if self.blob_disk_cache_mb < 0:
            raise ConfigurationError("AMBER_BLOB_DISK_CACHE_MB must be 0 (off) or more")
        if self.metrics_publish_seconds <= 0:
            raise ConfigurationError("AMBER_METRICS_PUBLISH_SECONDS must be positive")
        if self.public_base_url is not None:
            object.__setattr__(self, "public_base_url", normalise_base_url(self.public_base_url))
        _ = self.extraction_limits  # fail at start, not at the first citation

    @cached_property
    def citations(self) -> CitationPolicy:
        return CitationPolicy.from_section(self.extra.get("citations", {}))

    @cached_property
    def drift(self) -> DriftPolicy:
        return DriftPolicy.from_section(self.extra.get("drift", {}))

    @cached_property
    def extraction_limits(self) -> ExtractionLimits:
        return ExtractionLimits(
            workers=self.extract_workers,
            timeout_seconds=self.extract_timeout_seconds,
            request_seconds=self.extract_request_seconds,
            memory_mb=self.extract_memory_mb,
            max_pages=self.extract_max_pages,
            max_text_chars=self.extract_max_text_chars,
        )

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'amber.sqlite3').resolve()}"

    @property
    def resolved_blob_store(self) -> str:
        return self.blob_store or (self.data_dir / "blobs").resolve().as_uri()

    @property
    def durable(self) -> bool:
        return self.durability == "full"

    def with_overrides(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    def describe(self) -> dict[str, str]:
        """Settings as text with any password in a URL masked, for logs and ``amber config``."""
        shown = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            shown[f.name] = _mask_url(str(value)) if isinstance(value, str) else str(value)
        if self.key_secret:
            shown["key_secret"] = "***"
        if self.log_signing_key:
            shown["log_signing_key"] = "***"
        if self.api_key:
            shown["api_key"] = "***"
        shown["database_url"] = _mask_url(self.resolved_database_url)
        shown["blob_store"] = self.resolved_blob_store
        return shown

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        config_file = env.get(f"{ENV_PREFIX}CONFIG")
        if config_file:
            values.update(_read_config_file(Path(config_file)))
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None and f.name != "extra":
                values[f.name] = raw
        return cls(**{name: _coerce(name, value) for name, value in values.items()})


_FIELD_TYPES = {f.name: f.type for f in fields(Settings)}


def _coerce(name: str, value: Any) -> Any:
    if name == "extra":
        return value
    kind = _FIELD_TYPES.get(name)
    if kind is None:
        raise ConfigurationError(f"unknown setting {name!r}")
    try:
        if kind == "Path":
            return Path(value)
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "tuple[str, ...]":
            items = value.split(",") if isinstance(value, str) else list(value)
            return tuple(item.strip() for item in items if item.strip())
        if kind == "str | None":
            return str(value) or None
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"setting {name!r} has an invalid value") from exc


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read config file {path}: {exc}") from exc
    flat = {k: v for k, v in data.items() if not isinstance(v, dict)}
    sections = {k: v for k, v in data.items() if isinstance(v, dict)}
    if sections:
        flat["extra"] = sections
    return flat


def normalise_base_url(value: str) -> str:
    """A public base URL as URI-Ms start with it: absolute http(s), no credentials, query or
    fragment, no trailing slash (``http://a/`` and ``http://a`` are one base)."""
    parts = urlsplit(value.strip())
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.query
        or parts.fragment
        or any(c.isspace() or ord(c) < 0x21 for c in value.strip())
    ):
        raise ConfigurationError(
            "AMBER_PUBLIC_BASE_URL must be an absolute http(s) URL without credentials, "
            "query or fragment, like https://amber.example.org"
        )
    return urlunsplit((parts.scheme, parts.netloc.lower(), parts.path.rstrip("/"), "", ""))


def _validate_allow_entry(entry: str) -> None:
    # Imported here: archive.fetch imports this module (its fetcher reads Settings).
    from archive.fetch.policy import parse_allow_entry

    if not entry.strip():
        return
    try:
        parse_allow_entry(entry)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc


def _mask_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.password is None:
        return value
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))
