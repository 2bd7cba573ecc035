"""The one way a named query runs: ``StoreBase._fetch`` looks its text up in
``sql/queries/*.sql`` and runs it with tierq's timeouts (``postgres.execute_text``), on the
caller's connection or transaction, or as one autocommit statement on a pooled connection.

Rows come back typed by a psycopg row factory: ``positional(RowClass)`` builds a NamedTuple
from the row's values in column order (no dict per row: as cheap as a plain tuple), and
checks once per class and process that the statement's columns are the class's fields, in
order; ``by_name(RowClass)`` builds it by column name (``SELECT *`` rows, whose column
order follows the migrations); ``scalar_row`` and ``tuple_row`` give the first column or a
plain tuple."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

import psycopg
from psycopg.rows import RowFactory, RowMaker, class_row

from tierq.dal.postgres import Database, execute_text
from tierq.dal.sql_files import queries

T = TypeVar("T")
Conn = psycopg.Connection[Any]  # a pooled connection, or one inside a transaction
Params = Mapping[str, Any]

_checked: set[object] = set()  # row classes whose columns were found to match their fields


class ColumnMismatch(RuntimeError):
    """A statement's columns are not the fields of the row class it is read into."""


def positional(cls: type[T]) -> RowFactory[T]:
    """Rows as ``cls`` (a NamedTuple) made from their values in column order."""
    named: Any = cls  # (typing has no name for "a NamedTuple class")
    make: RowMaker[T] = named._make
    fields: tuple[str, ...] = named._fields

    def factory(cursor: Any) -> RowMaker[T]:
        if cls not in _checked:
            names = tuple(c.name for c in cursor.description or ())
            if names and names != fields:
                raise ColumnMismatch(f"{cls} has fields {fields}, the statement returns "
                                     f"{names}")
            if names:
                _checked.add(cls)
        return make

    return factory


def by_name(cls: type[T]) -> RowFactory[T]:
    """Rows as ``cls`` made from their columns by name (every column must be a field)."""
    return cast(RowFactory[T], class_row(cls))


class StoreBase:
    """What every part of the store shares: the database and the runner of named queries."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._sql = queries()

    def _fetch(self, name: str, params: Params | None, row: RowFactory[T],
               conn: Conn | None = None, *, relaxed: bool = False) -> list[T]:
        """Run the named query; its rows (empty when it returns none). Without ``conn``: one
        autocommit statement on a pooled connection (``relaxed``: the pool whose commits do
        not wait for the WAL flush)."""
        text = self._sql[name]
        if conn is None:
            with self.db.connection(relaxed=relaxed) as own:
                return _rows(own, text, params, row)
        return _rows(conn, text, params, row)

    def _execute(self, name: str, params: Params | None, conn: Conn | None = None) -> int:
        """Run a named statement that returns no rows; the number of rows it changed."""
        text = self._sql[name]
        if conn is None:
            with self.db.connection() as own:
                return execute_text(own, text, params).rowcount
        return execute_text(conn, text, params).rowcount


def _rows(conn: Conn, text: str, params: Params | None, row: RowFactory[T]) -> list[T]:
    with execute_text(conn, text, params, row_factory=row) as cur:
        return cast(list[T], cur.fetchall()) if cur.description is not None else []
