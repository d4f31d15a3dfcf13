"""Values the index records once and every process sharing it reads back.

A setting that names things outliving a process (the public base URL of every URI-M) cannot
come from each process's environment: two processes with different environments would name
the same memento twice. The first value recorded wins; only an explicit :meth:`replace`
changes it.
"""

from __future__ import annotations

from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite

from archive.dates import utc_now
from archive.index.schema import recorded_settings


class RecordedSettings:
    """The ``recorded_settings`` table: one text value per name."""

    def __init__(self, writer: Engine, reader: Engine, dialect: str) -> None:
        self._writer = writer
        self._reader = reader
        self._dialect = dialect

    def get(self, name: str) -> str | None:
        with self._reader.connect() as connection:
            value: str | None = connection.execute(
                select(recorded_settings.c.value).where(recorded_settings.c.name == name)
            ).scalar_one_or_none()
        return value

    def record_first(self, name: str, value: str) -> str:
        """Record ``value`` unless a value is recorded already; return the recorded one.

        Two processes starting at once agree: the insert ignores a conflict and both read
        back the row that won."""
        row = {"name": name, "value": value, "recorded_at": utc_now()}
        with self._writer.begin() as connection:
            connection.execute(self._insert().values(row).on_conflict_do_nothing())
            recorded: str = connection.execute(
                select(recorded_settings.c.value).where(recorded_settings.c.name == name)
            ).scalar_one()
        return recorded

    def replace(self, name: str, value: str) -> None:
        """Record ``value`` whether or not another value was recorded (an explicit change)."""
        statement = self._insert().values(name=name, value=value, recorded_at=utc_now())
        upsert = statement.on_conflict_do_update(
            index_elements=[recorded_settings.c.name],
            set_={"value": statement.excluded.value, "recorded_at": statement.excluded.recorded_at},
        )
        with self._writer.begin() as connection:
            connection.execute(upsert)

    def _insert(self) -> sqlite.Insert | postgresql.Insert:
        if self._dialect == "sqlite":
            return sqlite.insert(recorded_settings)
        return postgresql.insert(recorded_settings)
