"""PostgreSQL access: a connection pool (autocommit; explicit transactions where a
transition needs more than one statement), and the one way a statement runs
(``execute_text``). The named queries are run by ``tierq.dal.task_store.TaskStore``.

Timeouts: every statement tierq runs through this module, and every transaction
``Database.transaction`` opens, carries ``statement_timeout`` and ``lock_timeout``. Not as
libpq startup ``options`` (RDS Proxy refuses those), not as per-login settings (an
alternating-user rotation creates a new login without them). Behind a proxy, as ``SET
LOCAL`` (``set_config(..., true)``) of each statement's own transaction, since a session
``SET`` would pin every proxy connection. That adds no round trip: an autocommit statement
goes out in one pipeline with its ``set_config`` (one sync, one implicit transaction), and a
transaction's ``BEGIN`` and its settings are one simple query. The ``set_config`` is still a
statement of its own, about 25 µs of the server's CPU each. On a direct connection
(``Database(session_settings=True)``: the engine's without RDS Proxy, where statements are
prepared too) they are set once on the session when the pool opens the connection, and a
statement sends a ``set_config`` only when it wants other values (the shorter timeouts of
``scoped_timeouts``)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, TypeVar

import psycopg
from psycopg.adapt import Loader
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from tierq.dal import connect
from tierq.errors import DatabaseTimedOut, SequenceExhausted, Unavailable

Row = dict[str, Any]
T = TypeVar("T")

log = logging.getLogger(__name__)

# How many times in all ``Database.run_transaction`` runs a transaction that PostgreSQL
# aborts as a deadlock's victim (40P01): the other transaction has gone on, so a second
# run meets no cycle unless a third writer makes a new one.
DEADLOCK_ATTEMPTS = 4

# Once a checkout has waited the whole pool timeout in vain (PostgreSQL down, or every
# connection stuck), checkouts wait at most this long until one succeeds again: a request
# is answered 503 in about a second instead of holding its caller (and a Lambda's billed
# time) for the full timeout, request after request, through an outage.
UNREACHABLE_CHECKOUT_TIMEOUT = 1.0

# How long the pool retries one failed connection attempt (with its backoff: 1, 2, 4 … s)
# before it gives it up; a checkout that waits then starts a fresh attempt at once. The
# pool's default (5 minutes) lets the backoff run on past the outage: after 30 s without
# PostgreSQL an engine answered again only 26 s after PostgreSQL was back. With this, the
# gap between two attempts stays under ~2 s.
RECONNECT_GIVE_UP_SECONDS = 3.0


class JsonTextLoader(Loader):
    """Load json/jsonb as its text: payloads pass through to Valkey and HTTP unparsed."""

    def load(self, data: Any) -> str:
        return bytes(data).decode("utf-8")


class JsonbBinaryTextLoader(Loader):
    format = psycopg.pq.Format.BINARY

    def load(self, data: Any) -> str:
        # binary jsonb starts with a version byte (1)
        return bytes(data)[1:].decode("utf-8")


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.adapters.register_loader("jsonb", JsonTextLoader)
    conn.adapters.register_loader("json", JsonTextLoader)
    conn.adapters.register_loader("jsonb", JsonbBinaryTextLoader)


def local_settings(statement_timeout_ms: int, lock_timeout_ms: int, *,
                   synchronous_commit: bool = True) -> dict[str, str]:
    """The settings tierq gives each of its transactions (0 ms: no limit)."""
    settings = {"statement_timeout": f"{int(statement_timeout_ms)}ms",
                "lock_timeout": f"{int(lock_timeout_ms)}ms"}
    if not synchronous_commit:
        settings["synchronous_commit"] = "off"
    return settings


@lru_cache(maxsize=64)
def _setting_statements(settings: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """``(set_local, begin)`` for these settings: a ``set_config`` statement and a ``BEGIN``
    with the same ``SET LOCAL``s."""
    for name, value in settings:
        if not name.replace("_", "").isalnum() or not value.replace("_", "").isalnum():
            raise ValueError(f"not a plain setting: {name}={value}")
    return ("SELECT " + ", ".join(f"set_config('{name}', '{value}', true)"
                                  for name, value in settings),
            "BEGIN; " + "; ".join(f"SET LOCAL {name} = '{value}'" for name, value in settings))


# Timeouts a scope of work (a maintenance pass: tierq.maintenance.registry) gives the
# statements and transactions it runs on tierq's connections: they can only shorten the
# pool's (the operator's TIERQ_STATEMENT_TIMEOUT_MS / TIERQ_LOCK_TIMEOUT_MS stay the upper
# bound); the other settings (synchronous_commit) stay. A ContextVar: one thread's pass
# does not change another's statements. (statement_timeout_ms, lock_timeout_ms); 0: no limit.
_scoped_timeouts: ContextVar[tuple[int, int] | None] = ContextVar(
    "tierq_scoped_timeouts", default=None)


def shorter_timeout(a_ms: int, b_ms: int) -> int:
    """The shorter of two timeouts, where 0 means no limit (so any limit is shorter)."""
    if not a_ms or not b_ms:
        return a_ms or b_ms
    return min(a_ms, b_ms)


def _setting_ms(value: str) -> int:
    """A timeout as ``local_settings`` writes it ("15000ms", "0") in milliseconds."""
    return int(value.removesuffix("ms"))


@lru_cache(maxsize=64)
def _scoped_settings(local: tuple[tuple[str, str], ...],
                     scoped: tuple[int, int]) -> tuple[tuple[str, str], ...]:
    """A connection's settings under a scope's timeouts: each timeout the shorter of the
    two."""
    settings = dict(local)
    for name, limit in zip(("statement_timeout", "lock_timeout"), scoped, strict=True):
        own = _setting_ms(settings[name]) if name in settings else 0
        settings[name] = f"{shorter_timeout(own, limit)}ms"
    return tuple(settings.items())


@lru_cache(maxsize=64)
def _session_statement(settings: tuple[tuple[str, str], ...]) -> str:
    """The ``SET``s that give a session these settings, as one simple query."""
    _setting_statements(settings)  # (checks they are plain settings)
    return "; ".join(f"SET {name} = '{value}'" for name, value in settings)


@contextmanager
def scoped_timeouts(statement_timeout_ms: int, lock_timeout_ms: int) -> Iterator[None]:
    """Within this block (this thread), statements and transactions that tierq opens carry
    these timeouts where they are shorter than the pool's (0: no limit of the scope's own;
    a transaction already open keeps its own). A scope inside another one can only shorten
    the outer one's too."""
    if statement_timeout_ms < 0 or lock_timeout_ms < 0:
        raise ValueError(f"not a plain setting: statement_timeout={statement_timeout_ms}ms, "
                         f"lock_timeout={lock_timeout_ms}ms")
    outer = _scoped_timeouts.get()
    timeouts = (int(statement_timeout_ms), int(lock_timeout_ms))
    if outer is not None:
        timeouts = (shorter_timeout(outer[0], timeouts[0]),
                    shorter_timeout(outer[1], timeouts[1]))
    token = _scoped_timeouts.set(timeouts)
    try:
        yield
    finally:
        _scoped_timeouts.reset(token)


class TierqConnection(psycopg.Connection[Row]):
    """A pooled connection that knows the settings its transactions carry.

    ``set_local`` is one constant statement (prepared like any other after a few uses);
    ``begin`` opens a transaction with the same settings in one simple query. A connection
    whose session carries the settings (``session``) needs neither: ``set_local`` is None
    and ``begin`` a plain ``BEGIN``."""

    set_local: str | None = None
    begin: str = "BEGIN"
    local: tuple[tuple[str, str], ...] = ()
    session: tuple[tuple[str, str], ...] = ()  # the settings its session was given

    def use_local_settings(self, settings: Mapping[str, str], *,
                           session: bool = False) -> None:
        """The settings this connection's statements carry; ``session``: set them on the
        session now (one round trip), so that statements wanting these values send none."""
        self.local = tuple(settings.items())
        if not settings:
            self.set_local, self.begin = None, "BEGIN"
            return
        if session:
            self.execute(_session_statement(self.local), prepare=False)
            self.session = self.local
            self.set_local, self.begin = None, "BEGIN"
            return
        self.set_local, self.begin = _setting_statements(self.local)

    def statements(self) -> tuple[str | None, str]:
        """``(set_local, begin)`` for this moment: the connection's own, or with the
        shorter timeouts of the scope under way (``scoped_timeouts``); none to send when
        the session carries the values wanted."""
        scoped = _scoped_timeouts.get()
        if scoped is None or not self.local:
            return self.set_local, self.begin
        wanted = _scoped_settings(self.local, scoped)
        if wanted == self.session:
            return None, "BEGIN"
        return _setting_statements(wanted)


class Database:
    """Pools of autocommit connections to the system of record.

    ``relaxed`` statements run on a second pool (opened on first use) whose sessions commit
    without waiting for the WAL flush (``synchronous_commit = off``). Only outcomes whose loss
    in a database crash means *redelivery*, never loss, may go there: acks, when
    ``TIERQ_ACK_SYNCHRONOUS_COMMIT=false`` (a forgotten ack makes the reconciler dispatch the
    task again). Enqueues and every other transition always wait for the flush."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10,
                 timeout: float = 10.0, prepare: bool = True,
                 statement_timeout_ms: int = 15_000, lock_timeout_ms: int = 5_000,
                 resolve_url: Callable[[bool], str] | None = None,
                 session_settings: bool = False, routines: bool | None = None) -> None:
        """``prepare=False`` turns psycopg's automatic prepared statements off: needed behind
        RDS Proxy, where a prepared statement pins the client to one database connection.
        ``routines`` (by default: when not ``prepare``): the store runs the statements of
        which migration 0029 made PL/pgSQL functions as calls of those, whose plans the
        backend keeps where nothing is prepared (``StoreBase``).
        The timeouts go with every statement and transaction (see the module's doc): as
        ``SET LOCAL`` of each, or with ``session_settings`` (a direct connection, never
        behind a proxy: a session ``SET`` pins it there too) on the session of each
        connection the pool opens.

        ``resolve_url(fresh)`` (on AWS: the URL from the login's secret, cached) is asked
        for each new connection instead of ``url``; an attempt that follows a failed one
        asks with ``fresh=True``, so a rotated secret is picked up by the pool's next retry
        (about a second) instead of when its cache expires."""
        self.url = url
        if _trusts_system_roots(url):
            # (also in a process that got the URL ready-made, e.g. a Spark executor)
            connect.use_system_trust_store()
        self._fail_fast_timeout = min(UNREACHABLE_CHECKOUT_TIMEOUT, timeout)
        self.local_settings = local_settings(statement_timeout_ms, lock_timeout_ms)
        self._resolve_url = resolve_url
        self._unconfirmed_attempts = 0  # connection attempts since the last that succeeded
        self.session_settings = session_settings
        self.routines = not prepare if routines is None else routines
        self.pool = self._pool(self._conninfo, min_size, max_size, timeout, prepare, "tierq",
                               self.local_settings, self._connected, session_settings)
        self._relaxed: ConnectionPool[TierqConnection] | None = None
        self._relaxed_args = (max_size, timeout, prepare)
        self._relaxed_lock = threading.Lock()
        self._checkout_timed_out = False  # the last checkout waited the pool timeout in vain

    def _conninfo(self) -> str:
        if self._resolve_url is None:
            return self.url
        fresh = self._unconfirmed_attempts > 0
        self._unconfirmed_attempts += 1
        return self._resolve_url(fresh)

    def _connected(self) -> None:
        self._unconfirmed_attempts = 0

    @staticmethod
    def _pool(conninfo: Callable[[], str], min_size: int, max_size: int, timeout: float,
              prepare: bool, name: str, settings: Mapping[str, str],
              connected: Callable[[], None],
              session: bool) -> ConnectionPool[TierqConnection]:
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row,
                                  "prepare_threshold": 5 if prepare else None}

        def configure(conn: TierqConnection) -> None:
            _configure(conn)
            conn.use_local_settings(settings, session=session)
            connected()

        pool: ConnectionPool[TierqConnection] = ConnectionPool(
            conninfo,
            connection_class=TierqConnection,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs=kwargs,
            configure=configure,
            # no check on checkout (a round trip per statement); a broken connection
            # raises OperationalError (-> Unavailable) and the pool replaces it
            open=False,
            name=name,
            reconnect_timeout=RECONNECT_GIVE_UP_SECONDS,
        )
        pool.open(wait=False)
        return pool

    def relaxed_pool(self) -> ConnectionPool[TierqConnection]:
        """Its transactions carry ``synchronous_commit = off`` beside the timeouts (SET LOCAL
        too: a startup option would be refused by RDS Proxy)."""
        with self._relaxed_lock:
            if self._relaxed is None:
                max_size, timeout, prepare = self._relaxed_args
                self._relaxed = self._pool(self._conninfo, 1, max_size, timeout, prepare,
                                           "tierq-relaxed",
                                           {**self.local_settings, "synchronous_commit": "off"},
                                           self._connected, self.session_settings)
            return self._relaxed

    def close(self) -> None:
        self.pool.close()
        if self._relaxed is not None:
            self._relaxed.close()

    @contextmanager
    def connection(self, *, relaxed: bool = False) -> Iterator[TierqConnection]:
        """A pooled connection; store errors become ``Unavailable`` (HTTP 503), a statement
        or lock wait over its timeout ``DatabaseTimedOut`` (one kind of it), the end of
        ``tierq_task_seq`` ``SequenceExhausted``."""
        pool = self.relaxed_pool() if relaxed else self.pool
        failing_fast = self._checkout_timed_out
        with _store_errors():
            try:
                with pool.connection(
                        timeout=self._fail_fast_timeout if failing_fast else None) as conn:
                    if failing_fast:
                        self._checkout_timed_out = False
                    yield conn
            except PoolTimeout as exc:  # (an OperationalError: caught before the others)
                self._checkout_timed_out = True
                waited = self._fail_fast_timeout if failing_fast else pool.timeout
                raise Unavailable(f"PostgreSQL is not answering (no connection within "
                                  f"{waited:g}s)") from exc

    @contextmanager
    def dedicated_connection(self) -> Iterator[TierqConnection]:
        """A connection of its own, outside the pools, closed at the block's end (which
        ends its session and every session lock it took); store errors map as
        :meth:`connection`'s.

        It is opened as the pool opens one: the URL of ``resolve_url``, autocommit, no
        prepared statements, tierq's timeouts given as the pool gives them (no libpq
        startup ``options``, which RDS Proxy refuses). It is for a lock held through a run
        that takes pooled connections meanwhile: held on a pooled connection, such a lock
        would leave the run one connection fewer, none with a pool of one. The connection
        attempt waits at most the pool's timeout, unless the URL sets ``connect_timeout``."""
        with _store_errors():
            conninfo = self._conninfo()
            if "connect_timeout" not in _conninfo_params(conninfo):
                conninfo = psycopg.conninfo.make_conninfo(
                    conninfo, connect_timeout=max(1, math.ceil(self.pool.timeout)))
            conn = TierqConnection.connect(conninfo, autocommit=True, row_factory=dict_row,
                                           prepare_threshold=None)
            try:
                _configure(conn)
                conn.use_local_settings(self.local_settings, session=self.session_settings)
                self._connected()
                yield conn
            finally:
                conn.close()

    @contextmanager
    def transaction(self) -> Iterator[TierqConnection]:
        """One transaction on one pooled connection, with tierq's timeouts: committed on
        success, rolled back on an error."""
        with self.connection() as conn, transaction(conn):
            yield conn

    def run_transaction(self, body: Callable[[TierqConnection], T], *, what: str,
                        attempts: int = DEADLOCK_ATTEMPTS) -> T:
        """``body(conn)`` in one transaction, as :meth:`transaction`, run again from its
        start (at most ``attempts`` times in all, each logged) when PostgreSQL aborts it as
        the victim of a deadlock: for transactions whose rows cannot all be locked in one
        order (logic/flows.py). ``body`` must be safe to run again after a rollback;
        ``what`` names the transaction in the log."""
        with self.connection() as conn:
            for attempt in range(1, attempts + 1):
                try:
                    with transaction(conn):
                        return body(conn)
                except psycopg.errors.DeadlockDetected as exc:
                    if attempt == attempts:
                        raise
                    log.warning("%s: a deadlock's victim (attempt %d of %d), run again: %s",
                                what, attempt, attempts, str(exc).strip().splitlines()[0])
                    time.sleep(0.01 * attempt)
        raise AssertionError("unreachable")


@contextmanager
def _store_errors() -> Iterator[None]:
    """Store errors as tierq's: a statement or lock wait over its timeout
    ``DatabaseTimedOut``, the end of ``tierq_task_seq`` ``SequenceExhausted``, any other
    operational error (a connection refused or lost) ``Unavailable``."""
    try:
        yield
    except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:
        # (OperationalErrors too, but PostgreSQL answered: it is up, the work was slow)
        raise DatabaseTimedOut(detail=str(exc).strip()) from exc
    except psycopg.errors.SequenceGeneratorLimitExceeded as exc:
        raise SequenceExhausted("no place in line is left: tierq_task_seq has reached "
                                "its maximum") from exc
    except psycopg.OperationalError as exc:
        raise Unavailable("PostgreSQL is not answering", detail=str(exc).strip()) from exc


def _conninfo_params(url: str) -> dict[str, Any]:
    """The parameters a URL or conninfo string gives libpq (none when libpq cannot read
    it: the connection attempt will say why)."""
    try:
        return psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return {}


def _trusts_system_roots(url: str) -> bool:
    return _conninfo_params(url).get("sslrootcert") == "system"


def uuid_array(ids: Iterable[object]) -> str:
    """A ``uuid[]`` literal: much cheaper to send than a list adapted element by element."""
    return "{" + ",".join(map(str, ids)) + "}"


def int_array(values: Iterable[int]) -> str:
    """An ``int[]`` (or ``bigint[]``) literal, as ``uuid_array``."""
    return "{" + ",".join(map(str, values)) + "}"


def text_array(values: Sequence[str]) -> str:
    """A ``text[]`` literal, as ``uuid_array``: every element quoted, so that none is read
    as NULL nor split at a comma, a brace or a space; a backslash or a double quote in one
    is escaped (the only characters special inside quotes). Values from the caller (a lease
    token's tenant) cannot add, drop or shift an element."""
    if not values:
        return "{}"
    inner = '","'.join(values)
    if "\\" in inner or inner.count('"') != 2 * (len(values) - 1):
        inner = '","'.join([v.replace("\\", "\\\\").replace('"', '\\"') for v in values])
    return '{"' + inner + '"}'


def _set_local_for(conn: psycopg.Connection[Any]) -> str | None:
    """The ``set_config`` statement to send before a statement on ``conn``: None inside a
    transaction (the one who opened it chose its settings; ``transaction`` sets tierq's,
    and a caller may have set a shorter lock timeout of its own), on connections that are
    not tierq's, and when the session carries the values wanted."""
    if not isinstance(conn, TierqConnection) \
            or conn.info.transaction_status != TransactionStatus.IDLE:
        return None
    return conn.statements()[0]


def execute_text(conn: psycopg.Connection[Any], text: str,
                 params: Mapping[str, Any] | None = None, *,
                 row_factory: Any = None) -> psycopg.Cursor[Any]:
    """Execute one statement on a connection with tierq's timeouts; returns its cursor
    (results fetched). In autocommit, the ``set_config`` and the statement share one
    pipeline: one round trip, one implicit transaction, so the settings are LOCAL to it."""
    cur = conn.cursor(row_factory=row_factory) if row_factory else conn.cursor()
    set_local = _set_local_for(conn)
    if set_local is None:
        cur.execute(text, params or {})
        return cur
    with conn.pipeline():
        conn.execute(set_local)
        cur.execute(text, params or {})
    return cur


def _idle(conn: psycopg.Connection[Any]) -> bool:
    """No transaction is open on ``conn`` (asked afresh: the caller's statements change it)."""
    return conn.info.transaction_status == TransactionStatus.IDLE


@contextmanager
def transaction(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """A transaction on an idle autocommit connection that carries tierq's timeouts:
    ``BEGIN`` and the ``SET LOCAL``s go as one simple query (one round trip, as a plain
    BEGIN). Inside a transaction already, on a connection that is not tierq's, or on one
    whose session carries the values wanted, it is psycopg's ``conn.transaction()`` (a
    savepoint when nested)."""
    set_local, begin = conn.statements() if isinstance(conn, TierqConnection) else (None, "")
    if set_local is None or not _idle(conn):
        with conn.transaction():
            yield conn
        return
    conn.execute(begin, prepare=False)
    try:
        yield conn
    except BaseException:
        if not _idle(conn) and not conn.closed:
            with suppress(psycopg.Error):  # a broken connection: the pool discards it
                conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


Statement = tuple[str, Mapping[str, Any], Any]  # text, parameters, row factory (None: default)


def pipelined_transaction(conn: psycopg.Connection[Any],
                          statements: Iterable[Statement]) -> list[psycopg.Cursor[Any]]:
    """``statements`` in one transaction on an idle autocommit connection, sent as one
    pipeline with its ``BEGIN`` (and tierq's timeouts) and its ``COMMIT``: one round trip
    for the whole transaction. Each statement still runs on its own (under READ COMMITTED it
    sees what committed before it started, locks the one before took included). Each
    statement's cursor, its rows fetched; on an error the transaction is rolled back and
    the error raised."""
    set_local = conn.statements()[0] if isinstance(conn, TierqConnection) else None
    cursors: list[psycopg.Cursor[Any]] = []
    try:
        with conn.pipeline():
            conn.execute("BEGIN", prepare=False)
            if set_local is not None:
                conn.execute(set_local)
            for text, params, row_factory in statements:
                cur = conn.cursor(row_factory=row_factory) if row_factory else conn.cursor()
                cur.execute(text, params)
                cursors.append(cur)
            conn.execute("COMMIT", prepare=False)
    except BaseException:
        if not _idle(conn) and not conn.closed:
            with suppress(psycopg.Error):  # a broken connection: the pool discards it
                conn.execute("ROLLBACK")
        raise
    return cursors
