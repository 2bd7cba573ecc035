"""The largest command tierq sends to Valkey, checked before it leaves the process.

ElastiCache Serverless refuses a command of more than 3,999 arguments; a local Redis or
Valkey takes any number, so a call that grows with its input (the ids of a batch, the
members of an ack) would pass every local test and fail in production. Every connection
of the warm tier's client therefore counts the arguments of each command it packs — the
command's name, its keys and its arguments, all of them — and refuses one of more than
``MAX_COMMAND_ARGS`` with ``CommandTooLong`` before anything is sent. The check is on the
connection's packer, the one place every command goes through: single commands, pipelines
and the cluster client's per-node connections (``WarmTier.from_url`` builds the client with
``connection_class``); ``DirectCalls``, which packs with hiredis itself, calls ``check``.

The callers chunk by argument count (``per_call``), so the check only ever fires on a bug.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from redis.connection import Connection, ConnectionPool, SSLConnection

# ElastiCache Serverless refuses more than 3,999 arguments per command; whether the command's
# name counts is not documented, so it counts here (name + keys + arguments).
MAX_COMMAND_ARGS = 3999

T = TypeVar("T")


class CommandTooLong(ValueError):
    """A command with more arguments than ElastiCache Serverless takes (a tierq bug: every
    caller chunks its commands)."""


def argument_count(args: Sequence[Any]) -> int:
    """The arguments of a command as Valkey counts them: redis-py splits a first argument
    with spaces (``"SCRIPT LOAD"``) into words."""
    if not args:
        return 0
    first = args[0]
    if isinstance(first, str | bytes) and (" " in first if isinstance(first, str)
                                           else b" " in first):
        return len(first.split()) + len(args) - 1
    return len(args)


def check(args: Sequence[Any]) -> None:
    """``CommandTooLong`` when the command ``args`` (its name first) has more than
    ``MAX_COMMAND_ARGS`` arguments."""
    if len(args) > MAX_COMMAND_ARGS - 2 and argument_count(args) > MAX_COMMAND_ARGS:
        name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        raise CommandTooLong(
            f"a {name.split()[0].upper()} of {argument_count(args)} arguments: ElastiCache "
            f"Serverless refuses more than {MAX_COMMAND_ARGS} (a caller that does not chunk)")


# What callers size their commands to: two arguments less, because redis-py's cluster
# pipeline asks a node for the keys of a command it has no key rule for (EVALSHA among
# them) with ``COMMAND GETKEYS <the command>``, two arguments more than the command.
CALL_ARGS = MAX_COMMAND_ARGS - 2


def per_call(fixed: int, per_item: int = 1) -> int:
    """How many items of ``per_item`` arguments each fit in one command that has ``fixed``
    arguments besides them (its name, keys, fixed arguments), within ``CALL_ARGS``."""
    return (CALL_ARGS - fixed) // per_item


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most ``size`` (none for no items)."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


class _CheckedPacker:
    """A connection's command packer that refuses commands over the limit first."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def pack(self, *args: Any) -> Any:
        check(args)
        return self.inner.pack(*args)


class LimitedConnection(Connection):
    """A TCP connection whose every command is checked by ``check``."""

    def _construct_command_packer(self, packer: Any) -> Any:
        return _CheckedPacker(super()._construct_command_packer(packer))  # type: ignore[no-untyped-call]


class LimitedSSLConnection(SSLConnection):
    """A TLS connection whose every command is checked by ``check``."""

    def _construct_command_packer(self, packer: Any) -> Any:
        return _CheckedPacker(super()._construct_command_packer(packer))  # type: ignore[no-untyped-call]


def connection_class(url: str) -> type[Connection]:
    """The checked connection class for a ``redis://`` or ``rediss://`` URL."""
    return LimitedSSLConnection if url.startswith("rediss://") else LimitedConnection


class LimitedConnectionPool(ConnectionPool):
    """A pool of checked connections, whatever connection class it is given: the cluster
    client builds one per node from its URL's options (``connection_pool_class``), which name
    redis-py's own classes."""

    def __init__(self, connection_class: type[Connection] = Connection,
                 **kwargs: Any) -> None:
        if issubclass(connection_class, LimitedConnection | LimitedSSLConnection):
            pass
        elif issubclass(connection_class, SSLConnection):
            connection_class = LimitedSSLConnection
        elif issubclass(connection_class, Connection):
            connection_class = LimitedConnection
        super().__init__(connection_class=connection_class, **kwargs)
