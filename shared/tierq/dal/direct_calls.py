"""Calling Valkey on the hot paths with little client work per call.

A claim, an ack or an enqueue batch is one or two calls (a Lua script, or a single variadic
command). Through ``Redis`` and ``Script`` each call also takes a connection from the pool
and gives it back, goes through the retry wrapper and records client metrics: about 50 µs
of client CPU per call, more than the server's own work for a small batch. ``DirectCalls``
sends on a connection kept per thread (and per process: a forked child opens its own),
built by the client's own pool settings (TLS, AUTH and database included).

Failure handling is what the pool's default gives: a connection that fails is dropped and
the call is tried once more on a fresh one (a server that restarted leaves every kept
connection stale); if that fails too, the error goes up (``WarmTier`` turns it into
``Unavailable``). A script the server does not know (``NOSCRIPT``: restarted, flushed) is
loaded again and the call repeated. As with the pool's retry, a call whose reply was lost
can run twice; every script is safe to repeat. A claim's repeat pops nothing and answers
its first run's leases, which the claim gives back (lua/claim.lua, logic/claim.py).

Commands are packed here, not by the connection, so each is checked against ElastiCache's
argument limit here too (``dal/command_limit.check``).

Valkey in cluster mode goes through ``RedisCluster`` as before (it routes by key slot).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import redis
from hiredis import pack_command
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from tierq.dal.command_limit import check


class DirectCalls:
    """Scripts and commands over one connection per thread of ``client``'s pool."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: list[Any] = []

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            pool = self.client.connection_pool
            conn = pool.connection_class(**pool.connection_kwargs)
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._lock:
                self._open.append(conn)
        return conn

    def _drop(self, conn: Any) -> None:
        conn.disconnect()
        self._local.conn = None
        with self._lock:
            if conn in self._open:
                self._open.remove(conn)

    def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """The script's reply (EVALSHA; loaded again when the server does not know it)."""
        try:
            return self.command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            script.sha = self.client.script_load(script.script)
            return self.command("EVALSHA", script.sha, len(keys), *keys, *args)

    def command(self, *args: Any) -> Any:
        """The reply of one command; raises redis.ConnectionError / TimeoutError when Valkey
        does not answer on a fresh connection either; ``CommandTooLong`` (nothing sent) for
        a command of more arguments than ElastiCache takes."""
        check(args)
        for attempt in (1, 2):
            conn = self._connection()
            try:
                # hiredis packs every argument in C (redis-py's packer first walks them in
                # Python); the health check is the connection's own, as on any send
                conn.send_packed_command([pack_command(args)])
                return conn.read_response()
            except redis.ResponseError:
                raise  # an error reply: the connection is still in step
            except redis.ConnectionError:
                self._drop(conn)
                if attempt == 2:
                    raise
            except BaseException:
                # a timeout or an interrupted read leaves the reply on the wire: never reuse
                self._drop(conn)
                raise
        raise AssertionError("unreachable")

    def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The replies of several commands sent together (one round trip), in order; an
        error reply is returned in its place (a ``redis.ResponseError``), not raised, so the
        caller decides which of them matter. Raises as ``command`` when Valkey does not
        answer."""
        for args in commands:
            check(args)
        packed = b"".join([pack_command(tuple(args)) for args in commands])
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.send_packed_command([packed])
                replies: list[Any] = []
                for _ in commands:
                    try:
                        replies.append(conn.read_response())
                    except redis.ResponseError as exc:
                        replies.append(exc)  # the later replies are still on the wire
                return replies
            except redis.ConnectionError:
                self._drop(conn)
                if attempt == 2:
                    raise
            except BaseException:
                self._drop(conn)
                raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            conns, self._open = self._open, []
        for conn in conns:
            conn.disconnect()
