"""Versioned, forward-only schema migrations for SQLite and PostgreSQL.

Each migration is a numbered list of portable DDL statements, frozen once released: a new
need is a new migration, never an edit. ``migrate`` applies the missing ones in order, each
in its own transaction together with its ``schema_migrations`` row, so a crash mid-way
leaves the database at a well-defined version. On PostgreSQL an advisory lock serialises
replicas that start at the same moment.

Past 500 lines because it is the frozen list of every migration (data, not logic).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Engine, insert, inspect, select, text

from archive.dates import utc_now
from archive.index.schema import schema_migrations

_ADVISORY_LOCK_KEY = 0x616D626572  # "amber"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]
    # Statements only one dialect understands (triggers), keyed by dialect name.
    dialect_statements: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def for_dialect(self, dialect: str) -> tuple[str, ...]:
        extra = dict(self.dialect_statements).get(dialect, ())
        return self.statements + extra


def _append_only_sqlite(table: str) -> tuple[str, ...]:
    return tuple(
        f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
        for verb in ("UPDATE", "DELETE")
    )


def _append_only_postgresql(table: str) -> tuple[str, ...]:
    return (
        f"""CREATE FUNCTION {table}_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION '{table} is append-only'; END $$""",
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {table}_append_only()",
    )


# The evidence log's statements (archive/log): nothing may change or remove a leaf, except
# that erasure blanks a statement's body (statement set to NULL), every other column kept,
# so its leaf hash still holds the tree together while the erased facts are gone.
_LEAF_COLUMNS = ("idx", "kind", "subject", "tenant", "leaf_hash", "sequenced_at")
_LEAF_KEPT = "NEW.statement IS NULL AND " + " AND ".join(
    f"NEW.{c} = OLD.{c}" for c in _LEAF_COLUMNS
)
# A checkpoint's signed text never changes; its RFC 3161 timestamp is added later.
_CHECKPOINT_COLUMNS = ("size", "root", "note", "signed_at")
_CHECKPOINT_KEPT = " AND ".join(f"NEW.{c} = OLD.{c}" for c in _CHECKPOINT_COLUMNS)


def _guarded_sqlite(table: str, allowed: str) -> tuple[str, ...]:
    return (
        f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} WHEN NOT ({allowed}) "
        f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END",
        f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END",
    )


def _guarded_postgresql(table: str, allowed: str) -> tuple[str, ...]:
    return (
        f"""CREATE FUNCTION {table}_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'UPDATE' AND ({allowed}) THEN RETURN NEW; END IF;
            RAISE EXCEPTION '{table} is append-only';
        END $$""",
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {table}_append_only()",
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "tenants, blobs, mementos, idempotency keys",
        (
            """CREATE TABLE tenants (
                id TEXT PRIMARY KEY,
                created_at TIMESTAMP NOT NULL
            )""",
            """CREATE TABLE blobs (
                address TEXT PRIMARY KEY,
                size BIGINT NOT NULL,
                version_id TEXT,
                stored_at TIMESTAMP NOT NULL
            )""",
            """CREATE TABLE mementos (
                id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL REFERENCES tenants (id),
                uri_r TEXT NOT NULL,
                urir_key TEXT NOT NULL,
                captured_at TIMESTAMP NOT NULL,
                archived_at TIMESTAMP NOT NULL,
                content_hash TEXT NOT NULL REFERENCES blobs (address),
                blob_version_id TEXT,
                media_type TEXT NOT NULL,
                size BIGINT NOT NULL,
                scope TEXT NOT NULL CHECK (scope IN ('document', 'passage')),
                tool TEXT,
                final_url TEXT,
                http_status INTEGER,
                headers_json TEXT NOT NULL
            )""",
            "CREATE INDEX mementos_by_original ON mementos (tenant, urir_key, captured_at, scope, id)",
            "CREATE INDEX mementos_by_blob ON mementos (content_hash)",
            """CREATE TABLE idempotency_keys (
                tenant TEXT NOT NULL,
                key TEXT NOT NULL,
                request_hash TEXT NOT NULL,
                status_code INTEGER NOT NULL,
                response_json TEXT NOT NULL,
                created_at TIMESTAMP NOT NULL,
                PRIMARY KEY (tenant, key)
            )""",
            "INSERT INTO tenants (id, created_at) VALUES ('default', CURRENT_TIMESTAMP)",
        ),
    ),
    Migration(
        2,
        "API keys and the append-only read audit",
        (
            """CREATE TABLE api_keys (
                key_id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL REFERENCES tenants (id),
                role TEXT NOT NULL CHECK (role IN ('agent', 'auditor', 'admin')),
                name TEXT,
                key_hmac TEXT NOT NULL,
                created_at TIMESTAMP NOT NULL,
                revoked_at TIMESTAMP
            )""",
            "CREATE INDEX api_keys_by_tenant ON api_keys (tenant)",
            """CREATE TABLE read_audit (
                id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL,
                key_id TEXT NOT NULL,
                role TEXT NOT NULL,
                action TEXT NOT NULL,
                target TEXT NOT NULL,
                at TIMESTAMP NOT NULL
            )""",
            "CREATE INDEX read_audit_by_time ON read_audit (tenant, at, id)",
        ),
        (
            ("sqlite", _append_only_sqlite("read_audit")),
            ("postgresql", _append_only_postgresql("read_audit")),
        ),
    ),
    Migration(
        3,
        "transcripts and citations",
        (
            """CREATE TABLE transcripts (
                tenant TEXT NOT NULL REFERENCES tenants (id),
                id TEXT NOT NULL,
                created_at TIMESTAMP NOT NULL,
                updated_at TIMESTAMP NOT NULL,
                retention TEXT NOT NULL,
                retain_until TIMESTAMP NOT NULL,
                labels_json TEXT NOT NULL,
                legal_hold INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (tenant, id)
            )""",
            """CREATE TABLE citations (
                id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL,
                transcript_id TEXT NOT NULL,
                passage_memento_id TEXT NOT NULL REFERENCES mementos (id),
                document_memento_id TEXT REFERENCES mementos (id),
                document_hash TEXT NOT NULL,
                document_size BIGINT NOT NULL,
                document_media_type TEXT NOT NULL,
                document_uri_r TEXT NOT NULL,
                document_captured_at TIMESTAMP NOT NULL,
                document_tool TEXT,
                document_final_url TEXT,
                document_http_status INTEGER,
                document_headers_json TEXT NOT NULL,
                quote_hash TEXT NOT NULL,
                selector_json TEXT,
                position_start INTEGER NOT NULL,
                position_end INTEGER NOT NULL,
                extractor TEXT NOT NULL,
                extractor_version TEXT NOT NULL,
                normalisation TEXT NOT NULL,
                match_method TEXT NOT NULL,
                run_id TEXT,
                source_ids_json TEXT NOT NULL,
                created_at TIMESTAMP NOT NULL,
                FOREIGN KEY (tenant, transcript_id) REFERENCES transcripts (tenant, id)
            )""",
            "CREATE INDEX citations_by_transcript ON citations (tenant, transcript_id, created_at, id)",
            "CREATE INDEX citations_by_passage ON citations (passage_memento_id)",
            "CREATE INDEX citations_by_document ON citations (document_memento_id)",
        ),
    ),
    Migration(
        4,
        "retention: expiry, deletion in place (tombstones), holds, blob states, admin log",
        (
            "ALTER TABLE mementos ADD COLUMN expires_at TIMESTAMP",
            "ALTER TABLE mementos ADD COLUMN deleted_at TIMESTAMP",
            "ALTER TABLE mementos ADD COLUMN deletion_reason TEXT",
            "ALTER TABLE mementos ADD COLUMN legal_hold INTEGER NOT NULL DEFAULT 0",
            "CREATE INDEX mementos_by_expiry ON mementos (expires_at) WHERE deleted_at IS NULL",
            "ALTER TABLE blobs ADD COLUMN state TEXT NOT NULL DEFAULT 'live'",
            "ALTER TABLE blobs ADD COLUMN lock_until TIMESTAMP",
            "ALTER TABLE blobs ADD COLUMN lock_legal_hold INTEGER NOT NULL DEFAULT 0",
            "CREATE INDEX blobs_by_state ON blobs (state) WHERE state <> 'live'",
            """CREATE TABLE admin_log (
                id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL,
                key_id TEXT NOT NULL,
                action TEXT NOT NULL,
                target_kind TEXT NOT NULL,
                target_id TEXT NOT NULL,
                reason TEXT NOT NULL,
                detail_json TEXT NOT NULL,
                at TIMESTAMP NOT NULL
            )""",
            "CREATE INDEX admin_log_by_time ON admin_log (tenant, at, id)",
        ),
        (
            ("sqlite", _append_only_sqlite("admin_log")),
            ("postgresql", _append_only_postgresql("admin_log")),
        ),
    ),
    Migration(
        5,
        "drift: checks, per-citation drift state, transcript review flags",
        (
            """CREATE TABLE drift_checks (
                id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL,
                citation_id TEXT NOT NULL REFERENCES citations (id),
                transcript_id TEXT NOT NULL,
                memento_id TEXT NOT NULL,
                uri_r TEXT NOT NULL,
                host TEXT NOT NULL,
                run_id TEXT NOT NULL,
                checked_at TIMESTAMP NOT NULL,
                verdict TEXT NOT NULL CHECK (verdict IN ('identical', 'cosmetic', 'material',
                    'reversal', 'gone', 'soft_404', 'unreachable')),
                redirected_to TEXT,
                http_status INTEGER,
                error TEXT,
                fetch_ms INTEGER,
                extract_ms INTEGER,
                classify_ms INTEGER,
                extractor TEXT,
                extractor_version TEXT,
                rules_version TEXT NOT NULL,
                live_hash TEXT,
                found_start INTEGER,
                found_end INTEGER,
                found_method TEXT,
                found_score REAL,
                reasons_json TEXT NOT NULL,
                diff_json TEXT,
                new_passage_memento_id TEXT REFERENCES mementos (id),
                live_document_memento_id TEXT REFERENCES mementos (id)
            )""",
            "CREATE INDEX drift_checks_by_citation ON drift_checks (tenant, citation_id, checked_at, id)",
            "CREATE INDEX drift_checks_by_host ON drift_checks (tenant, host, checked_at)",
            "CREATE INDEX drift_checks_by_passage ON drift_checks (new_passage_memento_id)",
            """CREATE TABLE drift_state (
                citation_id TEXT PRIMARY KEY REFERENCES citations (id),
                tenant TEXT NOT NULL,
                last_check_id TEXT NOT NULL,
                last_checked_at TIMESTAMP NOT NULL,
                last_verdict TEXT NOT NULL,
                last_conclusive_verdict TEXT,
                last_new_passage_memento_id TEXT,
                last_new_passage_hash TEXT,
                stable_streak INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX drift_state_by_time ON drift_state (last_checked_at)",
            """CREATE TABLE transcript_reviews (
                tenant TEXT NOT NULL,
                transcript_id TEXT NOT NULL,
                needs_review INTEGER NOT NULL DEFAULT 0,
                reasons_json TEXT NOT NULL,
                flagged_at TIMESTAMP,
                cleared_by TEXT,
                cleared_note TEXT,
                cleared_at TIMESTAMP,
                PRIMARY KEY (tenant, transcript_id),
                FOREIGN KEY (tenant, transcript_id) REFERENCES transcripts (tenant, id)
            )""",
            "CREATE INDEX transcript_reviews_open ON transcript_reviews (tenant, needs_review, flagged_at)",
        ),
    ),
    Migration(
        6,
        "retention: sweep indexes whose cost follows what expired, not the archive",
        (
            # (expires_at, id) serves the sweep's keyset pagination from the index alone; the
            # single-column one left ties on expires_at to a sort of the whole tie group.
            "DROP INDEX mementos_by_expiry",
            "CREATE INDEX mementos_due ON mementos (expires_at, id) WHERE deleted_at IS NULL",
            # SQLite cannot prove state = 'deleting' implies state <> 'live', so the old partial
            # index was never used there and finding dying blobs scanned every blob.
            "DROP INDEX blobs_by_state",
            "CREATE INDEX blobs_deleting ON blobs (address) WHERE state = 'deleting'",
            # Tombstoning blanks drift diffs by memento and evaluation follows re-captured
            # documents: both scanned drift_checks without these.
            "CREATE INDEX drift_checks_by_memento ON drift_checks (memento_id)",
            "CREATE INDEX drift_checks_by_live_document ON drift_checks (live_document_memento_id)",
        ),
    ),
    Migration(
        7,
        "retention: cited evidence expires with its transcripts, before its grace date too",
        (
            # Until now a memento's cached expiry started at archived_at + grace and citations
            # only raised it, so evidence of short transcripts outlived them until the grace
            # date. Data only: each live memento some transcript reaches (citations, and drift
            # checks' captures) is re-dated to the latest retain_until among them. The
            # working table is dropped in the same transaction.
            """CREATE TABLE retention_redate_7 (
                memento_id TEXT PRIMARY KEY,
                until TIMESTAMP NOT NULL
            )""",
            """INSERT INTO retention_redate_7 (memento_id, until)
            SELECT reach.memento_id, max(transcripts.retain_until)
            FROM (
                SELECT passage_memento_id AS memento_id, tenant, transcript_id FROM citations
                UNION ALL
                SELECT document_memento_id, tenant, transcript_id FROM citations
                WHERE document_memento_id IS NOT NULL
                UNION ALL
                SELECT new_passage_memento_id, tenant, transcript_id FROM drift_checks
                WHERE new_passage_memento_id IS NOT NULL
                UNION ALL
                SELECT live_document_memento_id, tenant, transcript_id FROM drift_checks
                WHERE live_document_memento_id IS NOT NULL
            ) AS reach
            JOIN transcripts
                ON transcripts.tenant = reach.tenant AND transcripts.id = reach.transcript_id
            GROUP BY reach.memento_id""",
            """UPDATE mementos SET expires_at = (
                SELECT until FROM retention_redate_7 WHERE memento_id = mementos.id
            )
            WHERE deleted_at IS NULL
            AND id IN (SELECT memento_id FROM retention_redate_7)""",
            "DROP TABLE retention_redate_7",
        ),
    ),
    Migration(
        8,
        "recorded settings: values every process sharing the index must agree on",
        (
            # Today one row: the public base URL, recorded when the first server starts, so
            # the CLI, the jobs and every replica mint the same URI-M for a memento.
            """CREATE TABLE recorded_settings (
                name TEXT PRIMARY KEY,
                value TEXT NOT NULL,
                recorded_at TIMESTAMP NOT NULL
            )""",
        ),
    ),
    Migration(
        9,
        "browser sessions: a signed-in API key, by the hash of a random session id",
        (
            # Only the SHA-256 of the session id is stored: a leaked table signs nobody in.
            # The key is joined on every use, so revoking it ends its sessions at once.
            """CREATE TABLE sessions (
                id_hash TEXT PRIMARY KEY,
                tenant TEXT NOT NULL REFERENCES tenants (id),
                key_id TEXT NOT NULL REFERENCES api_keys (key_id),
                role TEXT NOT NULL,
                created_at TIMESTAMP NOT NULL,
                idle_expires_at TIMESTAMP NOT NULL,
                expires_at TIMESTAMP NOT NULL
            )""",
            "CREATE INDEX sessions_by_key ON sessions (key_id)",
            # The pages list a tenant's most recently updated transcripts first.
            "CREATE INDEX transcripts_by_update ON transcripts (tenant, updated_at)",
        ),
    ),
    Migration(
        10,
        "change generations: what replicas on PostgreSQL remember, and until when",
        (
            # One row per kind of change (archive/index/generations.py); a change's own
            # transaction moves its row, so every replica's next request sees it.
            """CREATE TABLE change_generations (
                kind TEXT PRIMARY KEY,
                generation BIGINT NOT NULL
            )""",
            """INSERT INTO change_generations (kind, generation)
            VALUES ('deletions', 0), ('revocations', 0), ('timemaps', 0)""",
        ),
    ),
    Migration(
        11,
        "evidence log: leaves sequenced with their rows, tree nodes, signed checkpoints",
        (
            # One row per leaf, its index dense from 0: sequenced in the transaction of the
            # row it attests (archive/log/sequencer.py).
            """CREATE TABLE log_leaves (
                idx BIGINT PRIMARY KEY,
                kind TEXT NOT NULL,
                subject TEXT NOT NULL,
                tenant TEXT NOT NULL,
                statement TEXT,
                leaf_hash TEXT NOT NULL,
                sequenced_at TIMESTAMP NOT NULL
            )""",
            "CREATE INDEX log_leaves_by_subject ON log_leaves (subject, kind)",
            # 'sequenced': leaves given an index; 'integrated': leaves in the tree. Two rows,
            # so that writers (which lock the first) never wait for the integrator.
            """CREATE TABLE log_counters (
                name TEXT PRIMARY KEY,
                value BIGINT NOT NULL
            )""",
            "INSERT INTO log_counters (name, value) VALUES ('sequenced', 0), ('integrated', 0)",
            # The hash of every perfect subtree: level 0 holds the leaf hashes, node (l, i)
            # covers leaves [i * 2^l, (i + 1) * 2^l).
            """CREATE TABLE log_nodes (
                level INTEGER NOT NULL,
                idx BIGINT NOT NULL,
                hash TEXT NOT NULL,
                PRIMARY KEY (level, idx)
            )""",
            """CREATE TABLE log_checkpoints (
                size BIGINT PRIMARY KEY,
                root TEXT NOT NULL,
                note TEXT NOT NULL,
                signed_at TIMESTAMP NOT NULL,
                tsa_response TEXT,
                tsa_at TIMESTAMP
            )""",
        ),
        (
            (
                "sqlite",
                _guarded_sqlite("log_leaves", _LEAF_KEPT)
                + _append_only_sqlite("log_nodes")
                + _guarded_sqlite("log_checkpoints", _CHECKPOINT_KEPT),
            ),
            (
                "postgresql",
                _guarded_postgresql("log_leaves", _LEAF_KEPT)
                + _append_only_postgresql("log_nodes")
                + _guarded_postgresql("log_checkpoints", _CHECKPOINT_KEPT),
            ),
        ),
    ),
    Migration(
        12,
        "evidence log: find the first timestamped checkpoint holding a leaf by index",
        (
            # A proof document's checkpoint (archive/log/proofs.py) and the time of the last
            # timestamp, without reading every checkpoint signed since (one a second).
            """CREATE INDEX log_checkpoints_stamped ON log_checkpoints (size)
            WHERE tsa_response IS NOT NULL""",
        ),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version


def applied_versions(connection: Connection) -> set[int]:
    if not inspect(connection).has_table("schema_migrations"):
        return set()
    return set(connection.execute(select(schema_migrations.c.version)).scalars().all())


def migrate(engine: Engine) -> list[int]:
    """Bring the schema to ``LATEST_VERSION``; return the versions applied now."""
    applied: list[int] = []
    with engine.connect() as connection:
        postgres = connection.dialect.name == "postgresql"
        if postgres:
            connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_LOCK_KEY})
            connection.commit()
        try:
            _ensure_bookkeeping(connection)
            for migration in MIGRATIONS:
                if _apply(connection, migration):
                    applied.append(migration.version)
        finally:
            if postgres:
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_LOCK_KEY})
                connection.commit()
    return applied


def _ensure_bookkeeping(connection: Connection) -> None:
    with connection.begin():
        connection.execute(
            text(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version INTEGER PRIMARY KEY, description TEXT NOT NULL,"
                " applied_at TIMESTAMP NOT NULL)"
            )
        )


def _apply(connection: Connection, migration: Migration) -> bool:
    with connection.begin():
        # By membership, not by the highest version: numbers are reserved per change, so
        # a lower one may land after a higher one and must still be applied.
        if migration.version in applied_versions(connection):
            return False
        for statement in migration.for_dialect(connection.dialect.name):
            connection.execute(text(statement))
        connection.execute(
            insert(schema_migrations).values(
                version=migration.version,
                description=migration.description,
                applied_at=utc_now(),
            )
        )
    return True
