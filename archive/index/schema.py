"""The index's tables as SQLAlchemy Core objects, matching the latest migration.

Migrations (``archive/migrations.py``) own the DDL; this module only describes the current
shape so queries can be written in Core. Datetimes are stored as naive UTC and handed out
as aware UTC (the ``UTCDateTime`` type), identically on SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the index")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(
        self, value: datetime | str | None, dialect: Dialect
    ) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # SQLite hands back text for raw-DDL TIMESTAMP columns
            value = datetime.fromisoformat(value)
        return value.replace(tzinfo=UTC)

    # SQLite stores datetimes as text. These write and read exactly the text SQLAlchemy's
    # SQLite DATETIME does ("YYYY-MM-DD HH:MM:SS.ffffff"), with the C isoformat routines
    # instead of its generic formatting: datetimes are most of a write's bind work.
    def bind_processor(self, dialect: Dialect) -> Any:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def process(value: Any) -> str | None:
            naive = self.process_bind_param(value, dialect)
            return None if naive is None else naive.isoformat(" ", "microseconds")

        return process

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)

        def process(value: Any) -> datetime | None:
            if value is None:
                return None
            try:
                # One C call instead of parsing and then replacing the zone (5x faster: a
                # memento has four of these, read on every URI-M answer not remembered).
                return datetime.fromisoformat(value + "+00:00")
            except ValueError:  # text that already names its offset
                return datetime.fromisoformat(value).astimezone(UTC)

        return process


metadata = MetaData()

schema_migrations = Table(
    "schema_migrations",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("description", Text, nullable=False),
    Column("applied_at", UTCDateTime, nullable=False),
)

tenants = Table(
    "tenants",
    metadata,
    Column("id", Text, primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
)

blobs = Table(
    "blobs",
    metadata,
    Column("address", Text, primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("version_id", Text),
    Column("stored_at", UTCDateTime, nullable=False),
    Column("state", Text, nullable=False, default="live"),  # live | deleting | deleted
    Column("lock_until", UTCDateTime),  # S3 Object Lock retain-until applied to the object
    Column("lock_legal_hold", Integer, nullable=False, default=0),
)

mementos = Table(
    "mementos",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, ForeignKey("tenants.id"), nullable=False),
    Column("uri_r", Text, nullable=False),
    Column("urir_key", Text, nullable=False),
    Column("captured_at", UTCDateTime, nullable=False),
    Column("archived_at", UTCDateTime, nullable=False),
    Column("content_hash", Text, ForeignKey("blobs.address"), nullable=False),
    Column("blob_version_id", Text),
    Column("media_type", Text, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("scope", Text, nullable=False),
    Column("tool", Text),
    Column("final_url", Text),
    Column("http_status", Integer),
    Column("headers_json", Text, nullable=False),
    Column("expires_at", UTCDateTime),
    Column("deleted_at", UTCDateTime),
    Column("deletion_reason", Text),
    Column("legal_hold", Integer, nullable=False, default=0),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("key", Text, primary_key=True),
    Column("request_hash", Text, nullable=False),
    Column("status_code", Integer, nullable=False),
    Column("response_json", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", Text, primary_key=True),
    Column("tenant", Text, ForeignKey("tenants.id"), nullable=False),
    Column("role", Text, nullable=False),
    Column("name", Text),
    Column("key_hmac", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime),
)

read_audit = Table(
    "read_audit",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("key_id", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("at", UTCDateTime, nullable=False),
)

transcripts = Table(
    "transcripts",
    metadata,
    Column("tenant", Text, ForeignKey("tenants.id"), primary_key=True),
    Column("id", Text, primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("retention", Text, nullable=False),
    Column("retain_until", UTCDateTime, nullable=False),
    Column("labels_json", Text, nullable=False),
    Column("legal_hold", Integer, nullable=False),
)

citations = Table(
    "citations",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("transcript_id", Text, nullable=False),
    Column("passage_memento_id", Text, ForeignKey("mementos.id"), nullable=False),
    Column("document_memento_id", Text, ForeignKey("mementos.id")),
    Column("document_hash", Text, nullable=False),
    Column("document_size", BigInteger, nullable=False),
    Column("document_media_type", Text, nullable=False),
    Column("document_uri_r", Text, nullable=False),
    Column("document_captured_at", UTCDateTime, nullable=False),
    Column("document_tool", Text),
    Column("document_final_url", Text),
    Column("document_http_status", Integer),
    Column("document_headers_json", Text, nullable=False),
    Column("quote_hash", Text, nullable=False),
    Column("selector_json", Text),
    Column("position_start", Integer, nullable=False),
    Column("position_end", Integer, nullable=False),
    Column("extractor", Text, nullable=False),
    Column("extractor_version", Text, nullable=False),
    Column("normalisation", Text, nullable=False),
    Column("match_method", Text, nullable=False),
    Column("run_id", Text),
    Column("source_ids_json", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    ForeignKeyConstraint(["tenant", "transcript_id"], ["transcripts.tenant", "transcripts.id"]),
)

admin_log = Table(
    "admin_log",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("key_id", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("target_kind", Text, nullable=False),
    Column("target_id", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("detail_json", Text, nullable=False),
    Column("at", UTCDateTime, nullable=False),
)

drift_checks = Table(
    "drift_checks",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("citation_id", Text, ForeignKey("citations.id"), nullable=False),
    Column("transcript_id", Text, nullable=False),
    Column("memento_id", Text, nullable=False),  # the cited passage memento
    Column("uri_r", Text, nullable=False),
    Column("host", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("checked_at", UTCDateTime, nullable=False),
    Column("verdict", Text, nullable=False),
    Column("redirected_to", Text),
    Column("http_status", Integer),
    Column("error", Text),
    Column("fetch_ms", Integer),
    Column("extract_ms", Integer),
    Column("classify_ms", Integer),
    Column("extractor", Text),
    Column("extractor_version", Text),
    Column("rules_version", Text, nullable=False),
    Column("live_hash", Text),
    Column("found_start", Integer),
    Column("found_end", Integer),
    Column("found_method", Text),
    Column("found_score", Float),
    Column("reasons_json", Text, nullable=False),
    Column("diff_json", Text),
    Column("new_passage_memento_id", Text, ForeignKey("mementos.id")),
    Column("live_document_memento_id", Text, ForeignKey("mementos.id")),
)

drift_state = Table(
    "drift_state",
    metadata,
    Column("citation_id", Text, ForeignKey("citations.id"), primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("last_check_id", Text, nullable=False),
    Column("last_checked_at", UTCDateTime, nullable=False),
    Column("last_verdict", Text, nullable=False),
    Column("last_conclusive_verdict", Text),
    Column("last_new_passage_memento_id", Text),
    Column("last_new_passage_hash", Text),
    Column("stable_streak", Integer, nullable=False, default=0),
)

transcript_reviews = Table(
    "transcript_reviews",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("transcript_id", Text, primary_key=True),
    Column("needs_review", Integer, nullable=False, default=0),
    Column("reasons_json", Text, nullable=False),
    Column("flagged_at", UTCDateTime),
    Column("cleared_by", Text),
    Column("cleared_note", Text),
    Column("cleared_at", UTCDateTime),
    ForeignKeyConstraint(["tenant", "transcript_id"], ["transcripts.tenant", "transcripts.id"]),
)

recorded_settings = Table(
    "recorded_settings",
    metadata,
    Column("name", Text, primary_key=True),
    Column("value", Text, nullable=False),
    Column("recorded_at", UTCDateTime, nullable=False),
)

log_leaves = Table(
    "log_leaves",
    metadata,
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("kind", Text, nullable=False),  # memento | citation | tombstone
    Column("subject", Text, nullable=False),  # the memento's or citation's id
    Column("tenant", Text, nullable=False),
    Column("statement", Text),  # RFC 8785 JSON; NULL once erased
    Column("leaf_hash", Text, nullable=False),  # hex SHA-256(0x00 || statement)
    Column("sequenced_at", UTCDateTime, nullable=False),
)

log_counters = Table(
    "log_counters",
    metadata,
    Column("name", Text, primary_key=True),  # sequenced | integrated
    Column("value", BigInteger, nullable=False),
)

log_nodes = Table(
    "log_nodes",
    metadata,
    Column("level", Integer, primary_key=True, autoincrement=False),
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("hash", Text, nullable=False),  # hex
)

log_checkpoints = Table(
    "log_checkpoints",
    metadata,
    Column("size", BigInteger, primary_key=True, autoincrement=False),
    Column("root", Text, nullable=False),  # hex
    Column("note", Text, nullable=False),  # the signed note, verbatim
    Column("signed_at", UTCDateTime, nullable=False),
    Column("tsa_response", Text),  # base64 RFC 3161 response over the note
    Column("tsa_at", UTCDateTime),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id_hash", Text, primary_key=True),
    Column("tenant", Text, ForeignKey("tenants.id"), nullable=False),
    Column("key_id", Text, ForeignKey("api_keys.key_id"), nullable=False),
    Column("role", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("idle_expires_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

change_generations = Table(
    "change_generations",
    metadata,
    Column("kind", Text, primary_key=True),
    Column("generation", BigInteger, nullable=False),
)

# The indexes the migrations create, declared here too so that the Core tables describe the
# whole schema (tests/test_schema.py holds the two equal).
for _name, _table, _columns in (
    ("mementos_by_original", mementos, ("tenant", "urir_key", "captured_at", "scope", "id")),
    ("mementos_by_blob", mementos, ("content_hash",)),
    ("api_keys_by_tenant", api_keys, ("tenant",)),
    ("sessions_by_key", sessions, ("key_id",)),
    ("transcripts_by_update", transcripts, ("tenant", "updated_at")),
    ("read_audit_by_time", read_audit, ("tenant", "at", "id")),
    ("citations_by_transcript", citations, ("tenant", "transcript_id", "created_at", "id")),
    ("citations_by_passage", citations, ("passage_memento_id",)),
    ("citations_by_document", citations, ("document_memento_id",)),
    ("admin_log_by_time", admin_log, ("tenant", "at", "id")),
    ("drift_checks_by_citation", drift_checks, ("tenant", "citation_id", "checked_at", "id")),
    ("drift_checks_by_host", drift_checks, ("tenant", "host", "checked_at")),
    ("drift_checks_by_passage", drift_checks, ("new_passage_memento_id",)),
    ("drift_checks_by_memento", drift_checks, ("memento_id",)),
    ("drift_checks_by_live_document", drift_checks, ("live_document_memento_id",)),
    ("drift_state_by_time", drift_state, ("last_checked_at",)),
    ("log_leaves_by_subject", log_leaves, ("subject", "kind")),
    ("transcript_reviews_open", transcript_reviews, ("tenant", "needs_review", "flagged_at")),
):
    Index(_name, *(_table.c[c] for c in _columns))
# Partial: only what a sweep or a write has to find.
Index(
    "mementos_due",
    mementos.c.expires_at,
    mementos.c.id,
    sqlite_where=mementos.c.deleted_at.is_(None),
    postgresql_where=mementos.c.deleted_at.is_(None),
)
Index(
    "blobs_deleting",
    blobs.c.address,
    sqlite_where=blobs.c.state == "deleting",
    postgresql_where=blobs.c.state == "deleting",
)
Index(
    "log_checkpoints_stamped",
    log_checkpoints.c.size,
    sqlite_where=log_checkpoints.c.tsa_response.is_not(None),
    postgresql_where=log_checkpoints.c.tsa_response.is_not(None),
)
