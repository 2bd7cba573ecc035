"""The PostgreSQL shards of a deployment: their names and URLs, the order in which a
(queue, tenant) pair ranks them (rendezvous hashing), and the shard tag a task id carries.

A deployment names its shards in ``TIERQ_SHARD_URLS``: comma-separated items, each
``name=url`` or a bare ``url`` (named after its database, e.g. ``.../tierq_b`` → ``tierq-b``).
Names are permanent: they decide where new pairs go and they are written into every pair's
home record, so a shard keeps its name for life, whatever its URL becomes. The first item is
the default shard (the one a single-shard deployment has). Without ``TIERQ_SHARD_URLS`` the
deployment has one shard, ``default``, at ``DATABASE_URL`` (or the secret's endpoint).

On AWS (template.yaml) the shards are found by a naming convention instead
(:func:`shards_from_settings`): ``TIERQ_SHARD_NAMES`` lists every shard, the default
first. The default shard is where ``DB_HOST`` and ``DB_SECRET_ARN`` say, as in a deployment
without shards; each further shard ``<name>`` has an entry in Parameter Store,
``<TIERQ_SHARD_DIRECTORY>/<name>``: a JSON object with its proxy's ``host``, its ``dbname``
and the ARNs of its ``app_secret`` and ``owner_secret``, written by the shard's stack once
its database is migrated. (Not one environment variable per shard: a Lambda function's 4 KB
of environment would not hold many; see docs/architecture.md §14.)

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson

from tierq.config import Settings
from tierq.core.lazy import lazy_dataclass
from tierq.dal import connect
from tierq.extras import MissingExtraError

DEFAULT_SHARD = "default"
# a shard name: lower case, digits and dashes; it appears in environment variable names
# (TIERQ_SHARD_<NAME>_...), logs and metrics dimensions
SHARD_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
MAX_SHARDS = 64
TAG_DIGITS = 4  # hex digits of a task id that carry its shard's tag
SHARD_URLS = "TIERQ_SHARD_URLS"
SHARD_NAMES = "TIERQ_SHARD_NAMES"
SHARD_DIRECTORY = "TIERQ_SHARD_DIRECTORY"
DIRECTORY_MAX_AGE_SECONDS = 300  # as the secrets: a process sees a new entry within minutes
Login = Literal["app", "owner"]


class ShardConfigError(ValueError):
    """``TIERQ_SHARD_URLS`` (or a list of shard names) is not usable; the message says why."""


@lazy_dataclass(frozen=True)
class ShardSpec:
    name: str
    url: str
    # On AWS: the URL from the login's secret, asked for each new connection (``fresh``
    # after a refused one) so that a rotated secret is picked up (Database(resolve_url=)).
    resolve_url: Callable[[bool], str] | None = field(default=None, compare=False,
                                                      repr=False)

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


def parse_shard_names(text: str) -> list[str]:
    """The names of ``TIERQ_SHARD_NAMES`` (comma-separated, the default shard first)."""
    names = [item.strip() for item in text.split(",")]
    if not any(names):
        raise ShardConfigError(f"{SHARD_NAMES} is empty; name at least the default shard")
    for position, name in enumerate(names, 1):
        if not name:
            raise ShardConfigError(f"{SHARD_NAMES}: item {position} is empty")
    check_names(names)
    return names


@lazy_dataclass(frozen=True)
class DirectoryEntry:
    """Where a further shard of an AWS deployment is: its entry in Parameter Store."""

    host: str  # its RDS Proxy's endpoint
    dbname: str | None
    app_secret: str  # ARN of the application's login
    owner_secret: str  # ARN of the owner's login (migrations)

    @classmethod
    def parse(cls, parameter: str, text: str) -> DirectoryEntry:
        try:
            data: Any = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ShardConfigError(f"the shard entry {parameter} is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ShardConfigError(f"the shard entry {parameter} is not a JSON object")
        missing = [key for key in ("host", "app_secret", "owner_secret")
                   if not isinstance(data.get(key), str) or not data[key]]
        if missing:
            raise ShardConfigError(f"the shard entry {parameter} lacks {', '.join(missing)}")
        dbname = data.get("dbname")
        return cls(host=data["host"], dbname=str(dbname) if dbname else None,
                   app_secret=data["app_secret"], owner_secret=data["owner_secret"])

    def settings(self, base: Settings, login: Login = "app") -> Settings:
        """``base`` pointed at this shard, logging in as its application or its owner
        (then with the application's secret as ``DB_APP_SECRET_ARN``, as the migrations
        expect)."""
        owner = login == "owner"
        return base.replace(
            db_host=self.host, db_name=self.dbname or base.db_name,
            db_secret_arn=self.owner_secret if owner else self.app_secret,
            db_app_secret_arn=self.app_secret if owner else None)


def read_directory(path: str) -> dict[str, str]:
    """The parameters under ``path`` in Parameter Store (name below the path → value),
    cached for a few minutes like the secrets."""
    # Powertools parameters imports boto3: Lambda's runtime ships it, elsewhere the 'aws'
    # extra installs it.
    try:
        from aws_lambda_powertools.utilities import parameters
    except ModuleNotFoundError as error:
        raise MissingExtraError.from_error(
            error, "aws", f"{SHARD_DIRECTORY} (Parameter Store)") from error
    found = parameters.get_parameters(path, max_age=DIRECTORY_MAX_AGE_SECONDS)
    return {str(name): str(value) for name, value in found.items()}


def shards_from_settings(
        settings: Settings, *, login: Login = "app",
        directory: Callable[[str], Mapping[str, str]] = read_directory) -> list[ShardSpec]:
    """The deployment's shards, the default first:

    - ``TIERQ_SHARD_URLS`` when it is set (``name=url`` items, see :func:`parse_shard_urls`);
    - else, on AWS, ``TIERQ_SHARD_NAMES``: the first shard at ``DB_HOST`` with the login of
      ``DB_SECRET_ARN`` (or at ``DATABASE_URL``), each further one where its entry under
      ``TIERQ_SHARD_DIRECTORY`` says, with its application's login (``login="app"``) or its
      owner's (``"owner"``, the migrations; ``DB_SECRET_ARN`` is then the owner's too);
    - else one shard, ``default``, at ``DATABASE_URL`` (or the secret's endpoint).

    Raises ``ShardConfigError`` naming the variable or the entry that is missing or wrong,
    and RuntimeError when the default shard's own variables are missing."""
    if settings.shard_urls:
        return parse_shard_urls(settings.shard_urls)
    names = parse_shard_names(settings.shard_names) if settings.shard_names else [DEFAULT_SHARD]
    # all checked before any login
    entries = directory_entries(names[1:], settings.shard_directory, directory)
    specs = [_secret_spec(names[0], settings)]
    for name, entry in entries.items():
        specs.append(_secret_spec(name, entry.settings(settings, login)))
    return specs


def directory_entries(
        names: Sequence[str], shard_directory: str,
        directory: Callable[[str], Mapping[str, str]] = read_directory,
) -> dict[str, DirectoryEntry]:
    """The Parameter Store entries of the further shards ``names`` (none: nothing is read)
    under ``shard_directory`` (the path of ``TIERQ_SHARD_DIRECTORY``)."""
    if not names:
        return {}
    path = shard_directory.strip().rstrip("/")
    if not path:
        raise ShardConfigError(
            f"{SHARD_NAMES} names further shards ({', '.join(names)}) but {SHARD_DIRECTORY}"
            " (the Parameter Store path of their entries) is not set")
    found = directory(path)
    entries: dict[str, DirectoryEntry] = {}
    for name in names:
        parameter = f"{path}/{name}"
        if name not in found:
            raise ShardConfigError(
                f"shard {name!r} ({SHARD_NAMES}) has no entry {parameter} in Parameter Store:"
                " its stack is not deployed, or the path is wrong")
        entries[name] = DirectoryEntry.parse(parameter, found[name])
    return entries


def _secret_spec(name: str, settings: Settings) -> ShardSpec:
    """The shard ``name`` at ``settings``' database (on AWS: its login's secret, asked again
    for each new connection)."""
    url = connect.database_url(settings)
    if not settings.db_secret_arn:
        return ShardSpec(name, url)
    return ShardSpec(name, url, lambda fresh: connect.database_url(settings, fresh=fresh))


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
