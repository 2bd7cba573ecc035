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
import math
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar, cast

import psycopg
from psycopg.pq import ExecStatus
from psycopg.rows import RowFactory, RowMaker, scalar_row

from tierq.core.lazy import generate_namedtuple, is_deferred_namedtuple
from tierq.dal.postgres import Database, execute_text
from tierq.dal.sql_files import queries

log = logging.getLogger(__name__)
T = TypeVar("T")
Conn = psycopg.Connection[Any]  # a pooled connection, or one inside a transaction
Params = Mapping[str, Any]

# The prefix of a named statement's call of its PL/pgSQL function (migration 0029)
ROUTINE = "routine_"
# How often a store looks again for the functions it did not find (``_find_routines``)
ROUTINE_RECHECK_SECONDS = 60.0
_CALLED = re.compile(r"\bFROM\s+(tierq_\w+)\(")
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
        # The statements that run as calls of their functions (``routine_<name>``, migration
        # 0029) on a database that prepares nothing, where only the call is planned each
        # time: {statement: (its call, the function the call names)}. Each runs as its
        # call once the function is found (``_find_routines``), as itself until then.
        self._routines_wanted: dict[str, tuple[str, str]] = {}
        if db.routines:
            for name in self._sql:
                call = self._sql.get(f"{ROUTINE}{name}")
                if call is not None:
                    self._routines_wanted[name] = (f"{ROUTINE}{name}",
                                                   _called_function(call))
        self._routine_of: dict[str, str] = {}  # {statement: its call} of the ones found
        # when to look for the functions (time.monotonic()): now, or never again
        self._routines_due = 0.0 if self._routines_wanted else math.inf
        self._routines_warned = False

    @property
    def routines_wanted(self) -> frozenset[str]:
        """The statements that run as their functions once found (none where statements
        are prepared)."""
        return frozenset(self._routines_wanted)

    @property
    def routines_in_use(self) -> frozenset[str]:
        """The statements that run as their functions (none where statements are prepared,
        or before the first of them ran)."""
        return frozenset(self._routine_of)

    def _fetch(self, name: str, params: Params | None, row: RowFactory[T] | Positional[T],
               conn: Conn | None = None, *, relaxed: bool = False) -> list[T]:
        """Run the named query; its rows (empty when it returns none). Without ``conn``: one
        autocommit statement on a pooled connection (``relaxed``: the pool whose commits do
        not wait for the WAL flush)."""
        query = name
        if name in self._routines_wanted:
            if time.monotonic() >= self._routines_due:
                self._find_routines(conn)
            query = self._routine_of.get(name, name)
        text = self._sql[query]
        unchecked: Positional[T] | None = None
        if isinstance(row, Positional):
            if (row.cls, name) not in _checked:
                unchecked = row
            row = row.factory
        if query != name:
            try:
                return self._run_rows(text, name, params, row, unchecked, conn, relaxed)
            except (psycopg.errors.UndefinedFunction,
                    psycopg.errors.InsufficientPrivilege) as exc:
                # its function went (dropped, EXECUTE revoked) after it was found: look
                # again at the next call; an autocommit statement runs itself now, one in a
                # caller's transaction fails (the transaction is aborted) for it to retry
                if self._routines_wanted[name][1] not in str(exc):
                    raise
                self._routines_due = 0.0
                if conn is not None:
                    raise
                text = self._sql[name]
        return self._run_rows(text, name, params, row, unchecked, conn, relaxed)

    def _run_rows(self, text: str, name: str, params: Params | None, row: RowFactory[T],
                  unchecked: Positional[T] | None, conn: Conn | None,
                  relaxed: bool) -> list[T]:
        if conn is None:
            with self.db.connection(relaxed=relaxed) as own:
                return _rows(own, name, text, params, row, unchecked)
        return _rows(conn, name, text, params, row, unchecked)

    def _find_routines(self, conn: Conn | None) -> None:
        """Look for the functions of the statements that run as functions (one query, on
        ``conn`` when given); the ones found run from now on. While one is missing or not
        callable (code deployed before its migration ran, EXECUTE revoked), its statement
        runs itself, slower behind a pooler but never wrong; the store looks again every
        ``ROUTINE_RECHECK_SECONDS``, and says so once, as a warning."""
        wanted = self._routines_wanted
        functions = sorted({function for _, function in wanted.values()})
        found = set(self._fetch("routines_found", {"functions": functions}, scalar_row, conn))
        self._routine_of = {name: call for name, (call, function) in wanted.items()
                            if function in found}
        missing = [f for f in functions if f not in found]
        self._routines_due = time.monotonic() + ROUTINE_RECHECK_SECONDS if missing \
            else math.inf
        if missing and not self._routines_warned:
            self._routines_warned = True
            log.warning("functions of the statements are missing or not callable (%s): the "
                        "statements run unprepared until they are found (apply the "
                        "migrations); looked for again every %.0f s", ", ".join(missing),
                        ROUTINE_RECHECK_SECONDS)

    def _execute(self, name: str, params: Params | None, conn: Conn | None = None) -> int:
        """Run a named statement that returns no rows; the number of rows it changed."""
        text = self._sql[name]
        if conn is None:
            with self.db.connection() as own:
                return execute_text(own, text, params).rowcount
        return execute_text(conn, text, params).rowcount


def _called_function(call: str) -> str:
    """The function a ``routine_<name>`` query calls (``SELECT … FROM tierq_…(…)``)."""
    found = _CALLED.search(call)
    if found is None:
        raise ValueError(f"no function call in {call[:80]!r}")
    return found.group(1)


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


def first_and_keyed(rows: Iterable[tuple[str | None, int]]) -> tuple[int, dict[str, int]]:
    """An insert's answer of (id, seq) rows, the batch's first seq on the row whose id is
    NULL (insert_tasks_uniform_keyed, insert_batch_keyed): (that first seq, {id: seq} of
    the keyed rows inserted)."""
    first = 0
    inserted: dict[str, int] = {}
    for task_id, seq in rows:
        if task_id is None:
            first = seq
        else:
            inserted[task_id] = seq
    return first, inserted
