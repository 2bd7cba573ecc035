"""The PostgreSQL shards of a deployment: their names and URLs, the order in which a
(queue, tenant) pair ranks them (rendezvous hashing), and the shard tag a task id carries.

A deployment names its shards in ``TIERQ_SHARD_URLS``: comma-separated items, each
``name=url`` or a bare ``url`` (named after its database, e.g. ``.../tierq_b`` → ``tierq-b``).
Names are permanent: they decide where new pairs go and they are written into every pair's
home record, so a shard keeps its name for life, whatever its URL becomes. The first item is
the default shard (the one a single-shard deployment has). Without ``TIERQ_SHARD_URLS`` the
deployment has one shard, ``default``, at ``DATABASE_URL`` (or the secret's endpoint).

Rendezvous hashing: each shard scores ``blake2b(name, queue, tenant)``; a pair ranks the
shards by score, highest first. A new pair's home is the first of its ranking, and adding a
shard moves only the rankings' first places that it wins, never a home already recorded
(``tierq.logic.homes``).

Shard tags: a sharded deployment writes the 16-bit tag of the task's shard into the last
four hex digits of its id (the random tail of a UUIDv7: order by time is kept), so that a
task's status, cancel or DLQ entry is read on one shard rather than on each.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_SHARD = "default"
# a shard name: lower case, digits and dashes; it appears in environment variable names
# (TIERQ_SHARD_<NAME>_...), logs and metrics dimensions
SHARD_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
MAX_SHARDS = 64
TAG_DIGITS = 4  # hex digits of a task id that carry its shard's tag


class ShardConfigError(ValueError):
    """``TIERQ_SHARD_URLS`` (or a list of shard names) is not usable; the message says why."""


@dataclass(frozen=True)
class ShardSpec:
    name: str
    url: str

    @property
    def tag(self) -> int:
        return shard_tag(self.name)


def _name_of_url(url: str) -> str:
    path = urlsplit(url).path.strip("/")
    name = re.sub(r"[^a-z0-9-]", "-", path.lower()).strip("-")
    if not name:
        raise ShardConfigError(f"shard URL {redact(url)!r} names no database; give it a name "
                               "as name=url")
    return name


def redact(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    return re.sub(r"(//[^:/@]+):[^@/]*@", r"\1:***@", url)


def parse_shard_urls(text: str) -> list[ShardSpec]:
    """The shards of ``TIERQ_SHARD_URLS``, in order (the first is the default); raises
    ``ShardConfigError`` naming the item that is wrong."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ShardConfigError("TIERQ_SHARD_URLS is empty; name at least one database URL")
    specs: list[ShardSpec] = []
    for position, item in enumerate(items, 1):
        if not item:
            raise ShardConfigError(f"TIERQ_SHARD_URLS: item {position} is empty")
        name, sep, url = item.partition("=")
        if not sep or "://" in name:
            name, url = _name_of_url(item), item
        name, url = name.strip(), url.strip()
        if "://" not in url:
            raise ShardConfigError(f"TIERQ_SHARD_URLS: item {position} ({name!r}) is not a "
                                   "database URL (postgresql://…)")
        specs.append(ShardSpec(name, url))
    check_names([spec.name for spec in specs])
    return specs


def check_names(names: Sequence[str]) -> None:
    """Raise ``ShardConfigError`` unless the names are valid, distinct, at most
    ``MAX_SHARDS`` and their id tags distinct."""
    if not names:
        raise ShardConfigError("a deployment needs at least one shard")
    if len(names) > MAX_SHARDS:
        raise ShardConfigError(f"{len(names)} shards: at most {MAX_SHARDS}")
    seen: dict[int, str] = {}
    for name in names:
        if not SHARD_NAME.fullmatch(name):
            raise ShardConfigError(
                f"shard name {name!r}: use 1-31 lower-case letters, digits and dashes, "
                "starting with a letter")
        tag = shard_tag(name)
        if tag in seen:
            other = seen[tag]
            raise ShardConfigError(f"shard names {other!r} and {name!r}" + (
                " are the same" if other == name else
                " have the same id tag; rename one of them"))
        seen[tag] = name


def _score(name: str, queue: str, tenant: str) -> bytes:
    # NUL cannot occur in names, queues or tenants: the three parts cannot run together
    return hashlib.blake2b(f"{name}\0{queue}\0{tenant}".encode(), digest_size=8).digest()


def rendezvous_order(names: Iterable[str], queue: str, tenant: str) -> list[str]:
    """The shards as the pair ranks them, highest score first (ties, which need equal
    64-bit hashes, by name)."""
    return sorted(names, key=lambda name: (_score(name, queue, tenant), name), reverse=True)


def shard_tag(name: str) -> int:
    """The 16-bit tag a sharded deployment writes into the ids of the shard's tasks."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=2).digest(), "big")


def tag_ids(ids: list[str], tag: int) -> list[str]:
    """``ids`` (UUID strings) with their last four hex digits replaced by ``tag``."""
    suffix = f"{tag:04x}"
    return [task_id[:-TAG_DIGITS] + suffix for task_id in ids]


def tag_of(task_id: str) -> int:
    """The tag of a task id (as text); meaningful only for ids a sharded deployment made."""
    return int(str(task_id)[-TAG_DIGITS:], 16)
