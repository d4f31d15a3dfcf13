"""The schema is written twice: as Core tables (archive/index/schema.py), which the queries
use, and as migration DDL (archive/index/migrations.py), which builds real databases. This
holds the two equal on both backends, so neither can drift from the other unseen."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, MetaData, create_engine, inspect

from archive.index import Index
from archive.index.schema import metadata


def _type_family(type_: Any) -> str:
    """The storage family of a column type, as both backends can report it."""
    name = type(type_).__name__.upper()
    for family, words in (
        ("integer", ("INT", "BOOL")),
        ("datetime", ("DATE", "TIME")),
        ("binary", ("BLOB", "BYTEA", "BINARY")),
        ("real", ("REAL", "FLOAT", "DOUBLE", "NUMERIC")),
    ):
        if any(word in name for word in words):
            return family
    return "text"


def _shape(engine: Engine, table_names: list[str]) -> dict[str, object]:
    inspector = inspect(engine)
    shape: dict[str, object] = {}
    for name in table_names:
        primary = sorted(inspector.get_pk_constraint(name)["constrained_columns"])
        # SQLite lets a non-integer PRIMARY KEY column hold NULL unless it says NOT NULL (a
        # historical quirk), and reflects it as nullable; Amber never writes NULL keys.
        # The Core tables state the intent: primary keys are never NULL.
        columns = {
            c["name"]: (_type_family(c["type"]), bool(c["nullable"]) and c["name"] not in primary)
            for c in inspector.get_columns(name)
        }
        foreign = sorted(
            (tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
            for f in inspector.get_foreign_keys(name)
        )
        indexes = sorted(
            (i["name"], tuple(i["column_names"]), bool(i["unique"]))
            for i in inspector.get_indexes(name)
        )
        shape[name] = {
            "columns": columns,
            "primary": primary,
            "foreign": foreign,
            "indexes": indexes,
        }
    return shape


def _declared_shape(declared: MetaData) -> dict[str, object]:
    shape: dict[str, object] = {}
    for name, table in declared.tables.items():
        columns = {
            c.name: (_type_family(c.type), bool(c.nullable and not c.primary_key))
            for c in table.columns
        }
        primary = sorted(c.name for c in table.primary_key.columns)
        foreign = sorted(
            (
                tuple(e.parent.name for e in fk.elements),
                fk.referred_table.name,
                tuple(e.column.name for e in fk.elements),
            )
            for fk in table.foreign_key_constraints
        )
        indexes = sorted(
            (str(i.name), tuple(c.name for c in i.columns), bool(i.unique)) for i in table.indexes
        )
        shape[name] = {
            "columns": columns,
            "primary": primary,
            "foreign": foreign,
            "indexes": indexes,
        }
    return shape


def test_migrated_database_matches_the_core_tables(database_url: str) -> None:
    Index(database_url).close()  # migrates a fresh database to the latest version
    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        reflected = sorted(inspect(engine).get_table_names())
        declared = sorted(metadata.tables)
        assert reflected == declared
        assert _shape(engine, declared) == _declared_shape(metadata)
    finally:
        engine.dispose()
