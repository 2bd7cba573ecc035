"""The one way a named query runs: ``StoreBase._fetch`` looks its text up in
``sql/queries/*.sql`` and runs it with tierq's timeouts (``postgres.execute_text``), on the
caller's connection or transaction, or as one autocommit statement on a pooled connection.

Rows come back typed by a psycopg row factory:

| factory                  | gives                                                         |
| ------------------------ | ------------------------------------------------------------- |
| ``positional(RowClass)`` | a NamedTuple from the row's values in column order (no dict   |
|                          | per row: as cheap as a plain tuple)                           |
| ``scalar_row``           | the first column                                              |
| ``tuple_row``            | a plain tuple                                                 |

``positional`` checks once per (class, query) and process that the statement's columns are
the class's fields, in order; two statements read into one class are checked each on its
own. Statements name
their columns, never ``*``: a column a migration adds must not reach code that predates it
(migrations run before new code is live, and stay after a rollback of the code)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Generic, TypeVar, cast

import psycopg
from psycopg.pq import ExecStatus
from psycopg.rows import RowFactory, RowMaker

from tierq.core.lazy import generate_namedtuple, is_deferred_namedtuple
from tierq.dal.postgres import Database, execute_text
from tierq.dal.sql_files import queries

log = logging.getLogger(__name__)
T = TypeVar("T")
Conn = psycopg.Connection[Any]  # a pooled connection, or one inside a transaction
Params = Mapping[str, Any]

# The prefix of a named statement's call of its PL/pgSQL function (migration 0029)
ROUTINE = "routine_"
# (row class, query name) pairs whose columns were found to be the class's fields
_checked: set[tuple[type, str]] = set()


class ColumnMismatch(RuntimeError):
    """A statement's columns are not the fields of the row class it is read into."""


class Positional(Generic[T]):
    """Rows as ``cls`` (a NamedTuple) made from their values in column order. ``_fetch``
    checks each query's columns against the fields (``check``) once, before the rows are
    read: outside psycopg's row factory, so that a mismatch is raised as itself and leaves
    the connection usable (raised inside one, it breaks an autocommit statement's
    pipeline)."""

    __slots__ = ("cls", "factory", "fields")

    def __init__(self, cls: type[T]) -> None:
        named: Any = cls  # (typing has no name for "a NamedTuple class")
        if is_deferred_namedtuple(cls):
            generate_namedtuple(cls)  # (else `_make` below is the stand-in's, per row)
        self.cls = cls
        self.fields: tuple[str, ...] = named._fields
        make: RowMaker[T] = named._make
        self.factory: RowFactory[T] = lambda cursor: make

    def check(self, query: str, cursor: psycopg.Cursor[Any]) -> None:
        """Raise ``ColumnMismatch`` unless the query's columns are the fields, in order."""
        names = tuple(c.name for c in cursor.description or ())
        if names != self.fields:
            raise ColumnMismatch(f"query {query!r} returns {names}, {self.cls.__name__} has "
                                 f"fields {self.fields}")
        _checked.add((self.cls, query))


_positionals: dict[type, Positional[Any]] = {}  # one per row class: a call costs a lookup


def positional(cls: type[T]) -> Positional[T]:
    """Rows as ``cls`` (a NamedTuple) made from their values in column order."""
    made = _positionals.get(cls)
    if made is None:
        made = _positionals[cls] = Positional(cls)
    return made


class StoreBase:
    """What every part of the store shares: the database and the runner of named queries."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._sql = queries()
        # the named statements run as calls of their functions (``routine_<name>``, migration
        # 0029) on a database that prepares nothing: only the call is planned each time
        self._routine_of = {name: f"{ROUTINE}{name}" for name in self._sql
                            if f"{ROUTINE}{name}" in self._sql} if db.routines else {}

    def _fetch(self, name: str, params: Params | None, row: RowFactory[T] | Positional[T],
               conn: Conn | None = None, *, relaxed: bool = False) -> list[T]:
        """Run the named query; its rows (empty when it returns none). Without ``conn``: one
        autocommit statement on a pooled connection (``relaxed``: the pool whose commits do
        not wait for the WAL flush)."""
        routine = self._routine_of.get(name)
        unchecked: Positional[T] | None = None
        if isinstance(row, Positional):
            if (row.cls, name) not in _checked:
                unchecked = row
            row = row.factory
        if routine is not None:
            try:
                return self._rows_of(routine, name, params, row, unchecked, conn, relaxed)
            except psycopg.errors.UndefinedFunction:
                self._without_routines(name)
                if conn is not None:  # (its transaction is aborted: the caller's to retry)
                    raise
        return self._rows_of(name, name, params, row, unchecked, conn, relaxed)

    def _rows_of(self, query: str, name: str, params: Params | None, row: RowFactory[T],
                 unchecked: Positional[T] | None, conn: Conn | None,
                 relaxed: bool) -> list[T]:
        text = self._sql[query]
        if conn is None:
            with self.db.connection(relaxed=relaxed) as own:
                return _rows(own, name, text, params, row, unchecked)
        return _rows(conn, name, text, params, row, unchecked)

    def _without_routines(self, name: str) -> None:
        """Run the statements themselves from now on: the database lacks a function of
        migration 0029 (the code was deployed before the migrations ran). Slower behind a
        pooler, never wrong; said once, as a warning."""
        if self._routine_of:
            self._routine_of = {}
            log.warning("the function of %r is missing (migration 0029 not applied?): this "
                        "process runs the statements unprepared; apply the migrations", name)

    def _execute(self, name: str, params: Params | None, conn: Conn | None = None) -> int:
        """Run a named statement that returns no rows; the number of rows it changed."""
        text = self._sql[name]
        if conn is None:
            with self.db.connection() as own:
                return execute_text(own, text, params).rowcount
        return execute_text(conn, text, params).rowcount


def checked(row: Positional[Any], name: str, cursor: psycopg.Cursor[Any]) -> None:
    """``row.check`` of query ``name``'s cursor, once per (class, query) and process."""
    if (row.cls, name) not in _checked:
        row.check(name, cursor)


# The result statuses with which psycopg describes a result's columns (its ``description``).
_TUPLES = frozenset({ExecStatus.TUPLES_OK, ExecStatus.SINGLE_TUPLE, ExecStatus.TUPLES_CHUNK})


def returns_rows(cur: psycopg.Cursor[Any]) -> bool:
    """Whether ``cur.description`` is not None, read from its result without building the
    ``Column`` objects of the description (about 3 µs each, on every statement)."""
    res = cur.pgresult
    return res is not None and (res.nfields > 0 or res.status in _TUPLES)


def _rows(conn: Conn, name: str, text: str, params: Params | None, row: RowFactory[T],
          unchecked: Positional[T] | None) -> list[T]:
    with execute_text(conn, text, params, row_factory=row) as cur:
        if not returns_rows(cur):
            return []
        if unchecked is not None:
            unchecked.check(name, cur)
        return cast(list[T], cur.fetchall())
