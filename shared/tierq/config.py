"""Deployment settings, read from the environment once: one row per variable in ``Settings``.

Every Lambda function reads these settings at import, so they are a plain class, not a
pydantic model: building a model of some 80 fields there (its schema, and pydantic's model
machinery with it) costs each function about 40 M instructions, some 10 ms, of its cold
import. The class applies the same rules itself: each row names its variable (matched
without regard to case), its default and its bounds, and values are parsed as pydantic's
lax mode parses them (see ``Setting``). Every bad value is reported at once, in one
``SettingsError``.

Per-queue settings stored in Postgres (``tierq_queues``) override the defaults here.

The engine and ``tierq.aws`` read every variable through this class (a unit test,
tests/unit/test_settings_source.py, scans the modules). Outside it, by design:

| reads the environment itself                        | why                                  |
| --------------------------------------------------- | ------------------------------------ |
| the maintenance jobs' ``TIERQ_<JOB>_<FIELD>``       | derived from each job's config       |
| (``tierq.maintenance.registry``)                    | model, validated and named there     |
| ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``                | OpenSSL's own: libpq's OpenSSL reads |
| (``tierq.dal.connect.use_system_trust_store``)      | them, tierq only sets a default      |
| the client, the command line, the local stack, the  | their own documented variables, read |
| Glue job and the schema snapshot tool               | before any engine exists             |
"""


import math
import os
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any, ClassVar, Literal, TypeVar

# The longest a Lambda invocation runs: a scheduled function's ticks stop within it.
MAX_INVOCATION_SECONDS = 900.0

# The longest time budget of one maintenance pass (TIERQ_MAINTENANCE_BUDGET_SECONDS, and each
# job's budget_seconds: tierq.maintenance.registry.JobConfig), so a value accepted at startup
# is one every job accepts.
MAINTENANCE_BUDGET_MAX_SECONDS = 600.0
# The smallest TIERQ_TENANT_REQUESTS_PER_SECOND but 0 (see the field).
TENANT_RATE_MIN = 0.01
# The share of the warm tier's capacity one tenant may hold by default, and the least bound
# (TIERQ_TENANT_WARM_MAX_BYTES): with a quarter, no single tenant fills the cache, and the
# rest (Valkey's own overhead, other tenants) keeps three quarters.
TENANT_WARM_SHARE = 0.25
TENANT_WARM_MIN_BYTES = 1 << 20

# The words a boolean variable takes, in any case (pydantic's and Powertools' strtobool's).
TRUE_WORDS = frozenset({"1", "on", "t", "true", "y", "yes"})
FALSE_WORDS = frozenset({"0", "off", "f", "false", "n", "no"})
# An integer as text: digits (single underscores between them), an optional sign and an
# optional fraction of zeros ("12", " +1_000 ", "5.00"), as pydantic takes one.
INTEGER_TEXT = r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?"
# A value longer than this is shortened in an error message.
SHOWN_CHARS = 60


class SettingsError(ValueError):
    """Settings were refused: ``problems`` holds one line per bad value or broken rule, each
    naming its variable, and the message lists them all."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        if len(problems) == 1:
            message = problems[0]
        else:
            message = f"{len(problems)} bad settings:" + "".join(f"\n  {p}" for p in problems)
        super().__init__(message)

    def __reduce__(self) -> tuple[type["SettingsError"], tuple[list[str]]]:
        # (pickled or copied, it is rebuilt from its problems, not from its message)
        return SettingsError, (self.problems,)


class _Refused(Exception):
    """A value breaks its setting's rule; the message says how (``must be …``)."""


def _integer(value: Any) -> int:
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(INTEGER_TEXT, text):
            try:
                return int(text.partition(".")[0])
            except ValueError:  # (more digits than int() converts)
                pass
    elif isinstance(value, int):  # (a bool too, as 0 or 1)
        return int(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused("must be a finite number")
        if value.is_integer():
            return int(value)
    raise _Refused("must be a valid integer")


def _number(value: Any) -> float:
    if isinstance(value, str):
        text = value.strip()
        if text.isascii():  # (float() takes other scripts' digits; pydantic does not)
            try:
                return float(text)
            except ValueError:
                pass
    elif isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:
            pass
    raise _Refused("must be a valid number")


def _boolean(value: Any) -> bool:
    if isinstance(value, str):
        word = value.lower()
        if word in TRUE_WORDS or word in FALSE_WORDS:
            return word in TRUE_WORDS
    elif isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    raise _Refused("must be a valid boolean (true/false, 1/0, yes/no, on/off, t/f, y/n)")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise _Refused("must be a string")


_PARSERS: dict[type, Callable[[Any], Any]] = {
    int: _integer, float: _number, bool: _boolean, str: _text}


def _bound(number: int | float) -> str:
    """A bound as the rule reads: 900, not 900.0."""
    return str(int(number)) if isinstance(number, float) and number.is_integer() else str(number)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 4] + "...'"


class Setting:
    """One row of ``Settings``: the attribute ``name``, its environment ``variable`` and
    ``default``, and its rule.

    The type comes from the row's annotation: ``int``, ``float``, ``bool``, ``str``, a
    ``Literal`` of strings (``choices``) or one of these ``| None`` (``optional``: None is
    a value). Text is parsed as pydantic's lax mode parses it: an integer with an optional
    sign, single underscores between digits and a fraction of zeros (``" 1_000.0 "``, not
    ``"1.5"`` or ``"1e3"``); a number as ``float()`` takes it (``inf`` and ``nan`` too,
    unless ``finite``); a boolean as one of ``TRUE_WORDS`` or ``FALSE_WORDS`` in any case.
    Then the bounds: ``ge``, ``gt`` and ``le`` on numbers, ``min_length``, ``max_length``
    and ``pattern`` (the whole value matches it) on text. ``strip`` strips the text;
    ``empty_is_default`` makes blank text the default; ``check(variable, value)`` is a rule
    of the row's own, raising a ValueError (its message is prefixed with the variable
    unless it names it).
    """

    __slots__ = ("check", "choices", "default", "empty_is_default", "finite", "ge", "gt", "kind",
                 "le", "max_length", "min_length", "name", "optional", "pattern", "strip",
                 "variable")

    def __init__(self, variable: str, default: Any, *, ge: float | None = None,
                 gt: float | None = None, le: float | None = None,
                 min_length: int | None = None, max_length: int | None = None,
                 pattern: str | None = None, finite: bool = False, strip: bool = False,
                 empty_is_default: bool = False,
                 check: Callable[[str, Any], None] | None = None) -> None:
        self.name = ""  # (these three from the row's name and annotation: _tabulated)
        self.kind: type = str
        self.optional = False
        self.choices: tuple[str, ...] = ()
        self.variable = variable
        self.default = default
        self.ge, self.gt, self.le = ge, gt, le
        self.min_length, self.max_length, self.pattern = min_length, max_length, pattern
        self.finite, self.strip, self.empty_is_default = finite, strip, empty_is_default
        self.check = check

    def __repr__(self) -> str:
        return f"Setting({self.name}={self.variable}, default={self.default!r})"

    def parse(self, given: Any) -> Any:
        """``given`` (a variable's text or a keyword's value) as this setting's value; a
        ValueError naming the variable, the value and the rule it breaks otherwise."""
        if self.empty_is_default and isinstance(given, str) and not given.strip():
            return self.default
        if given is None and self.optional:
            return None
        try:
            value = self._within_bounds(_PARSERS[self.kind](given))
        except _Refused as refused:
            raise ValueError(f"{self.variable} {refused}, got {_shown(given)}") from None
        if self.strip:
            value = value.strip()
        if self.check is not None:
            try:
                self.check(self.variable, value)
            except ValueError as exc:  # (named, if its message does not say which variable)
                if self.variable in str(exc):
                    raise
                raise ValueError(f"{self.variable}: {exc}") from exc
        return value

    def _within_bounds(self, value: Any) -> Any:
        if self.choices and value not in self.choices:
            raise _Refused(f"must be one of {', '.join(map(repr, self.choices))}")
        if self.finite and not math.isfinite(value):
            raise _Refused("must be a finite number")
        # (NaN fails every bound, the upper one first)
        if self.le is not None and not value <= self.le:
            raise _Refused(f"must be less than or equal to {_bound(self.le)}")
        if self.ge is not None and not value >= self.ge:
            raise _Refused(f"must be greater than or equal to {_bound(self.ge)}")
        if self.gt is not None and not value > self.gt:
            raise _Refused(f"must be greater than {_bound(self.gt)}")
        if self.min_length is not None and len(value) < self.min_length:
            plural = "s" if self.min_length != 1 else ""
            raise _Refused(f"must have at least {self.min_length} character{plural}")
        if self.max_length is not None and len(value) > self.max_length:
            raise _Refused(f"must have at most {self.max_length} characters")
        if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
            raise _Refused(f"must match the pattern {self.pattern!r}")
        return value


def setting(variable: str, default: Any, **rule: Any) -> Any:
    """A row of ``Settings``: its variable, its default and its rule (``Setting``'s
    keywords). Typed Any so that the row's annotation is the attribute's type."""
    return Setting(variable, default, **rule)


def _kind(annotation: Any) -> tuple[type, bool, tuple[str, ...]]:
    """(parser type, optional, choices) of a row's annotation."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return str, False, args
    if isinstance(annotation, types.UnionType) and len(args) == 2 and type(None) in args:
        kind, _, choices = _kind(args[0] if args[1] is type(None) else args[1])
        return kind, True, choices
    if annotation in _PARSERS:
        return annotation, False, ()
    raise TypeError(f"a setting cannot be of type {annotation!r}")


SettingsT = TypeVar("SettingsT", bound=type[Any])


def _tabulated(cls: SettingsT) -> SettingsT:
    """The class with its rows gathered into ``fields`` (by name, in order) and taken off
    the class: an instance holds every value itself."""
    fields: dict[str, Setting] = {}
    for name, annotation in cls.__annotations__.items():
        row = cls.__dict__.get(name)
        if isinstance(row, Setting):
            row.name = name
            row.kind, row.optional, row.choices = _kind(annotation)
            assert row.variable == row.variable.upper(), row.variable
            fields[name] = row
            delattr(cls, name)
    cls.fields = types.MappingProxyType(fields)
    return cls


# Each row's own rules (Setting.check).

def _usable_shard_urls(variable: str, value: str) -> None:
    # raises ShardConfigError (a ValueError) naming the item
    if value:
        from tierq.dal import shards  # (a sharded deployment's only)

        shards.parse_shard_urls(value)


def _usable_shard_names(variable: str, value: str) -> None:
    if value:
        from tierq.dal import shards

        shards.parse_shard_names(value)


def _not_aws_namespace(variable: str, value: str) -> None:
    if value.startswith("AWS/"):
        raise ValueError(f"{variable} must not start with AWS/ (CloudWatch reserves it), got "
                         f"{value!r}")


def _a_usable_rate(variable: str, value: float) -> None:
    if 0 < value < TENANT_RATE_MIN:
        raise ValueError(f"{variable} must be 0 (no limit) or at least {TENANT_RATE_MIN:g}, got "
                         f"{value:g}")


def _a_bound_that_holds_a_task(variable: str, value: int | None) -> None:
    # a bound below one large task would keep a tenant's every queue cold for good
    if value is not None and 0 < value < TENANT_WARM_MIN_BYTES:
        raise ValueError(f"{variable} must be 0 (no bound) or at least {TENANT_WARM_MIN_BYTES} "
                         f"(1 MiB), got {value}")


def _one_word(variable: str, value: str) -> None:
    # a claim name or a scope is one word: blank or spaced values would match nothing
    # (or, for a scope, several words of the scope claim)
    if re.fullmatch(r"\S+", value) is None:
        raise ValueError(f"{variable} must be one word without spaces, got {value!r}")


@_tabulated
class Settings:
    """Everything the engine and ``tierq.aws`` read from the environment (the module's
    table lists what is read elsewhere, and why).

    ``Settings()`` reads the process environment; keyword arguments (by field name or by
    variable name; other names are ignored) take precedence over it.
    ``Settings.from_environ(mapping)`` reads that mapping instead of the process
    environment, and ``settings.replace(**changes)`` is a copy with some values changed.
    Each is checked as the environment's values are: a ``SettingsError`` lists every bad
    one. ``Settings.fields`` is the table below, by attribute name (``Setting``: the
    variable, the default and the bounds).
    """

    fields: ClassVar[Mapping[str, Setting]]

    database_url: str | None = setting("DATABASE_URL", None)
    # On AWS the database URL is built from a Secrets Manager secret and the proxy endpoint.
    db_secret_arn: str | None = setting("DB_SECRET_ARN", None)
    db_host: str | None = setting("DB_HOST", None)
    db_port: int = setting("DB_PORT", 5432)
    db_name: str = setting("DB_NAME", "tierq")
    # The application's login (every function but migrate, and the Glue job) comes from
    # DB_SECRET_ARN; the migrate function reads the owner's there and, from this one, the
    # application login it creates (see tierq.dal.migrate.ensure_app_login).
    db_app_secret_arn: str | None = setting("DB_APP_SECRET_ARN", None)
    # TLS towards RDS Proxy, verifying its certificate and host name. The proxy presents an
    # ACM certificate, so the roots are the system's trust store (``system``), not the RDS
    # CA bundle; only tests against a local server without TLS lower the mode.
    db_sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = \
        setting("DB_SSLMODE", "verify-full")
    db_sslrootcert: str = setting("DB_SSLROOTCERT", "system", min_length=1)
    # Set per transaction (SET LOCAL) behind RDS Proxy, per session on a direct connection,
    # never per login or as a startup option (tierq.dal.postgres): a statement
    # running longer, or waiting longer for a lock, is cancelled (HTTP 503). Both stay well
    # below the HTTP functions' 29 s timeout; 0 means no limit.
    statement_timeout_ms: int = setting("TIERQ_STATEMENT_TIMEOUT_MS", 15_000, ge=0,
                                         le=3_600_000)
    lock_timeout_ms: int = setting("TIERQ_LOCK_TIMEOUT_MS", 5_000, ge=0, le=3_600_000)
    # The migrations' own lock waits (tierq.dal.migrate): a transactional migration gives
    # up a lock wait after this long, lets the writers queued behind it through, and tries
    # again after a growing pause, this many times in all.
    migrate_lock_timeout_ms: int = setting("TIERQ_MIGRATE_LOCK_TIMEOUT_MS", 5_000, ge=1,
                                            le=600_000)
    migrate_lock_attempts: int = setting("TIERQ_MIGRATE_LOCK_ATTEMPTS", 10, ge=1, le=1_000)
    # How long a migration run waits for another run's advisory lock before it fails
    # naming the holder (within the migrate function's 300 s timeout).
    migrate_runner_wait_seconds: float = setting("TIERQ_MIGRATE_RUNNER_WAIT_SECONDS", 240.0,
                                                 gt=0, le=3_600)
    # What hands tierq's connections to PostgreSQL: ``transaction`` for RDS Proxy, which may
    # give each transaction another server connection and pins a client that keeps session
    # state: nothing prepared, timeouts per transaction, and the hottest statements run as
    # their PL/pgSQL functions (migration 0029), whose plans the server keeps; ``none`` for
    # a direct connection; ``auto``: ``transaction`` with DB_SECRET_ARN (on AWS), else
    # ``none``. A pooler that never pins (PgBouncer in transaction mode) is not enough:
    # promotion holds a session advisory lock over several transactions.
    db_pooler: Literal["auto", "none", "transaction"] = setting("TIERQ_DB_POOLER", "auto")
    db_pool_max: int = setting("TIERQ_DB_POOL_MAX", 10, ge=1)
    # How long a request waits for a pooled connection before it is answered 503. Once a
    # wait has run out, later ones wait at most a second until a checkout succeeds again.
    db_pool_timeout: float = setting("TIERQ_DB_POOL_TIMEOUT", 10.0, gt=0)

    @property
    def db_behind_pooler(self) -> bool:
        """Whether a transaction-pooling proxy stands before PostgreSQL (``db_pooler``)."""
        if self.db_pooler == "auto":
            return bool(self.db_secret_arn)
        return self.db_pooler == "transaction"

    # False lets acks commit without waiting for the WAL flush: faster, but a database crash
    # can forget the last few milliseconds of acks, and those tasks are delivered again
    # (never lost). The default waits: an ack that returned success is durable.
    ack_synchronous_commit: bool = setting("TIERQ_ACK_SYNCHRONOUS_COMMIT", True)
    # True: acks of one (queue, tenant) that arrive while another's commit is under way are
    # committed together, in one statement and one commit, by whichever of them finds the
    # pair's committer lock free (logic/ack_gathering.py): fewer PostgreSQL commits a task
    # for plain acks of small batches; a waiting ack's BLPOP takes the place of its commit.
    # Unset (None): true wherever a statement timeout bounds a committer's lock
    # (``gathers_acks``).
    ack_group_commit: bool | None = setting("TIERQ_ACK_GROUP_COMMIT", None,
                                            empty_is_default=True)
    # True: an enqueued batch admitted warm whose tasks have no group, parents, schedule,
    # trace or big payload writes its keyless tasks as one batch row of PostgreSQL
    # (migration 0030), and a plain ack of those appends their places instead of deleting
    # a row per task (logic/batch_rows.py): about half the database's CPU a task where
    # enqueues and acks come in batches. Off by default while a version that serves no
    # batch row may still run beside this one (a rolling update, a rollback): its ack of a
    # member would delete nothing, and the member would be delivered again (README.md,
    # *Upgrading*). Batch rows already written are served whatever it says.
    batch_rows: bool = setting("TIERQ_BATCH_ROWS", False)
    # The fewest keyless tasks an enqueue writes as one batch row (with TIERQ_BATCH_ROWS);
    # fewer are a row each. A batch row of a few tasks costs PostgreSQL more than their
    # rows: each ack of its members appends an end row to it, and the sweep deletes it
    # (python -m bench.batch_row_size: 1.25-1.32 times the rows' CPU for one task, about even
    # from 2 to 8, less from 16).
    batch_rows_min: int = setting("TIERQ_BATCH_ROWS_MIN", 16, ge=1, le=512)

    # Who a JWT caller is (tierq.aws.http.access): the claim naming its tenant, and the scope
    # that makes it an administrator (one whole word of the `scope` claim).
    tenant_claim: str = setting("TIERQ_TENANT_CLAIM", "tenant", max_length=128, check=_one_word)
    admin_scope: str = setting("TIERQ_ADMIN_SCOPE", "tierq/admin", max_length=256,
                               check=_one_word)

    valkey_url: str | None = setting("VALKEY_URL", None)
    valkey_cluster: bool = setting("VALKEY_CLUSTER", False)
    # On AWS, tierq's ElastiCache user authenticates with IAM tokens signed for the serverless
    # cache (tierq.dal.valkey_auth); elsewhere a password comes in VALKEY_URL.
    valkey_iam_user: str | None = setting("VALKEY_IAM_USER", None)
    valkey_cache_name: str | None = setting("VALKEY_CACHE_NAME", None)
    valkey_iam_region: str | None = setting("VALKEY_IAM_REGION", None)

    # Ready tasks the warm tier holds per (queue, tenant). The bytes below bound Valkey's
    # memory; this count only keeps each script's work per call bounded, which it is at this
    # size too (every script reads a pair's keys by id, by rank or in slices: lua/README.md),
    # and a larger one sends fewer tasks through the cold line (docs/architecture.md §3).
    warm_max: int = setting("TIERQ_WARM_MAX", 50_000, ge=1)
    # Bytes of task data (payload, key and a small envelope) the warm tier holds per
    # (queue, tenant); past it, tasks wait cold like past warm_max.
    warm_max_bytes: int = setting("TIERQ_WARM_MAX_BYTES", 64 * 1024 * 1024, ge=1024,
                                  le=1 << 40)
    # The warm tier's capacity in bytes (0: read from Valkey's ``maxmemory`` when Valkey
    # answers INFO and sets one; on AWS the template passes CacheMaxDataStorageGB here, since
    # ElastiCache refuses INFO and CONFIG to tierq's user). Sizes the tenants' bound below.
    warm_capacity_bytes: int = setting("TIERQ_WARM_CAPACITY_BYTES", 0, ge=0, le=1 << 50)
    # Bytes one tenant may hold in the warm tier over all its queues: its tasks' data plus
    # TENANT_TASK_CHARGE per task waiting or leased (logic/tenant_budget.py). Unset: a
    # quarter of the capacity (TENANT_WARM_SHARE); 0: no bound. At least 1 MiB when set.
    # (the template passes its parameter as given: empty when not set)
    tenant_warm_max_bytes: int | None = setting("TIERQ_TENANT_WARM_MAX_BYTES", None, ge=0,
                                                le=1 << 50, empty_is_default=True,
                                                check=_a_bound_that_holds_a_task)
    lease_seconds: int = setting("TIERQ_LEASE_SECONDS", 300, ge=1, le=43_200)
    max_attempts: int = setting("TIERQ_MAX_ATTEMPTS", 5, ge=1, le=1000)
    backoff_kind: Literal["fixed", "linear", "exponential"] = setting("TIERQ_BACKOFF_KIND",
                                                                      "exponential")
    backoff_base_seconds: float = setting("TIERQ_BACKOFF_BASE_SECONDS", 2.0, ge=0)
    backoff_cap_seconds: float = setting("TIERQ_BACKOFF_CAP_SECONDS", 3600.0, ge=0)
    backoff_jitter: float = setting("TIERQ_BACKOFF_JITTER", 0.1, ge=0, le=1)
    retention_seconds: int = setting("TIERQ_RETENTION_SECONDS", 7 * 86_400, ge=0)
    # At most 1 MiB: a claim always hands out its first task, and one task whose payload is
    # all quotes doubles on the wire — 1 MiB keeps any single task far inside Lambda's 6 MB.
    max_payload_bytes: int = setting("TIERQ_MAX_PAYLOAD_BYTES", 256 * 1024, ge=1,
                                     le=1024 * 1024)
    # Big payloads (tierq.logic.payloads): the bucket that holds them (template.yaml's
    # PayloadBucket; unset: no offloading), or locally a folder (`tierq dev`: .local/payloads)
    # whose presigned-like URLs the local gateway serves (tierq.dal.payload_store).
    payload_bucket: str | None = setting("TIERQ_PAYLOAD_BUCKET", None)
    payload_dir: str | None = setting("TIERQ_PAYLOAD_DIR", None)
    # the largest payload one upload may carry (S3's single PUT takes 5 GiB; a Worker holds
    # a payload in memory), and how long a presigned URL lives
    max_offloaded_payload_bytes: int = setting("TIERQ_MAX_OFFLOADED_PAYLOAD_BYTES",
                                               64 * 1024 * 1024, ge=1, le=5 * 1024 ** 3)
    payload_url_seconds: int = setting("TIERQ_PAYLOAD_URL_SECONDS", 900, ge=60, le=43_200)
    # an upload no task named within this long is deleted by the reaper (its key pending
    # since the presign; at most 30 days, well inside the bucket's lifecycle backstop), and
    # the most such uploads a tenant may have pending at once (a presign past it is 429)
    payload_pending_seconds: int = setting("TIERQ_PAYLOAD_PENDING_SECONDS", 86_400, ge=60,
                                           le=30 * 86_400)
    max_pending_payloads: int = setting("TIERQ_MAX_PENDING_PAYLOADS", 10_000, ge=1,
                                        le=10_000_000)

    reconcile_grace_seconds: float = setting("TIERQ_RECONCILE_GRACE_SECONDS", 60.0, ge=0)
    # An admission registered in Valkey for longer than this belonged to a crashed caller.
    admission_stale_seconds: float = setting("TIERQ_ADMISSION_STALE_SECONDS", 60.0, gt=0)
    cold_to_warm_every: float = setting("TIERQ_COLD_TO_WARM_EVERY", 5.0, gt=0)
    delayed_every: float = setting("TIERQ_DELAYED_EVERY", 1.0, gt=0)
    reaper_every: float = setting("TIERQ_REAPER_EVERY", 5.0, gt=0)
    cron_every: float = setting("TIERQ_CRON_EVERY", 10.0, gt=0)
    # The dispatcher (push delivery to consumer functions): the longest it waits before
    # looking again at a queue that had nothing ready.
    dispatcher_every: float = setting("TIERQ_DISPATCHER_EVERY", 1.0, gt=0, le=60)
    # The functions queues may name as consumers (the template's ConsumerFunctionArns): ARNs
    # (or, in the stack's account and region, names), comma separated; a consumer names one
    # by its ARN or, if it has TIERQ_CONSUMER_ARN_PREFIX, by the name that follows it.
    consumer_functions: str = setting("TIERQ_CONSUMER_FUNCTIONS", "")
    consumer_arn_prefix: str = setting("TIERQ_CONSUMER_ARN_PREFIX", "")
    # The dispatcher function that a task becoming ready wakes (tierq.logic.wake); empty: no
    # waking (the dispatcher's own function, and everything off AWS).
    dispatcher_function: str = setting("TIERQ_DISPATCHER_FUNCTION", "")
    # Sharded: how long a process trusts a pair's home it read. A pair's move waits this long
    # after closing the pair (tierq.logic.pair_moves), so it must be the same everywhere.
    home_cache_seconds: float = setting("TIERQ_HOME_CACHE_SECONDS", 300.0, ge=0, le=3600)
    # How long in-process caches of queue settings and tenant lists may be stale.
    settings_cache_seconds: float = setting("TIERQ_SETTINGS_CACHE_SECONDS", 1.0, ge=0)
    # How long a process's queue-wide claims may go on rotating over the ready tenants they
    # last read, instead of reading the index again each claim (logic/ready_tenants.py,
    # ``claim_window``): a tenant whose work became ready meanwhile waits at most this long
    # for them. 0: every claim reads the index.
    claim_window_reuse_ms: int = setting("TIERQ_CLAIM_WINDOW_REUSE_MS", 100, ge=0, le=5_000)
    # How long an Idempotency-Key of an enqueue or a dead-letter replay is remembered (in
    # PostgreSQL; the reaper purges it after), and one of an ack, nack, release or heartbeat
    # (in Valkey, where a busy worker fleet's keys would otherwise fill the cache).
    idempotency_ttl_seconds: int = setting("TIERQ_IDEMPOTENCY_TTL_SECONDS", 86_400, ge=60)
    idempotency_valkey_ttl_seconds: int = setting("TIERQ_IDEMPOTENCY_VALKEY_TTL_SECONDS", 300,
                                                  ge=60)

    # Maintenance by activity: each pass of the reaper and of the cold -> warm mover visits
    # the pairs with work in slices of this many, and stops starting new work once its time
    # budget is spent (the next pass goes on from there); below the 5 s ticks.
    maintenance_budget_seconds: float = setting("TIERQ_MAINTENANCE_BUDGET_SECONDS", 2.5, gt=0,
                                                le=MAINTENANCE_BUDGET_MAX_SECONDS)
    maintenance_slice: int = setting("TIERQ_MAINTENANCE_SLICE", 200, ge=1, le=10_000)
    # A (queue, tenant) without any row that nobody used for this long is forgotten.
    pair_retention_seconds: float = setting("TIERQ_PAIR_RETENTION_SECONDS", 30 * 86_400,
                                            ge=60)
    # Distinct queues a tenant may have (0: no cap); one more is 409 quota_exceeded.
    max_queues_per_tenant: int = setting("TIERQ_MAX_QUEUES_PER_TENANT", 1000, ge=0)
    # Cron schedules a tenant may have (0: no cap); a PUT of one more is 409 quota_exceeded
    # (replacing one of its schedules is not one more). Per database: on a sharded engine,
    # per shard.
    max_schedules_per_tenant: int = setting("TIERQ_MAX_SCHEDULES_PER_TENANT", 1000, ge=0)
    # The payload bytes one schedule keeps installed ahead (its occurrences not yet due):
    # occurrences x payload size. A PUT that would install more is 422; a tick installs at
    # most what fits (tierq.logic.schedules). The default holds the default horizon (4) of
    # the largest default payload (256 KiB), or 1,000 occurrences of 1 KiB.
    schedule_max_installed_bytes: int = setting("TIERQ_SCHEDULE_MAX_INSTALLED_BYTES",
                                                1024 * 1024, ge=1024, le=1024 ** 3)
    # A tenant caller's own limits on the HTTP API (tierq.logic.tenant_limits), so that one
    # tenant meets them before the shared ones (the functions' reserved concurrency, whose
    # throttles reach every caller as 5xx): requests a second (a token bucket of this burst)
    # and long polls (claims with wait_seconds > 0) in flight. Past either: 429 with
    # Retry-After. 0: no limit. Admins are not limited by them.
    # The rate is 0 or at least TENANT_RATE_MIN (one request in 100 s): a smaller one would
    # ask for a Retry-After of hours and key lifetimes past what Valkey takes.
    tenant_requests_per_second: float = setting("TIERQ_TENANT_REQUESTS_PER_SECOND", 100.0,
                                                ge=0, le=1_000_000, check=_a_usable_rate)
    tenant_requests_burst: int = setting("TIERQ_TENANT_REQUESTS_BURST", 200, ge=1,
                                         le=1_000_000)
    tenant_long_polls: int = setting("TIERQ_TENANT_LONG_POLLS", 10, ge=0, le=100_000)
    # Every caller's long polls in flight together are kept below the claim function's
    # reserved concurrency (template.yaml's ClaimReservedConcurrency; 0: none, no cap), at
    # TIERQ_LONG_POLLS_PERCENT of it, so the rest stays for claims that do not wait: past
    # it a long poll is 429 (tierq.logic.tenant_limits, Settings.long_polls_cap).
    claim_reserved_concurrency: int = setting("TIERQ_CLAIM_RESERVED_CONCURRENCY", 0, ge=0,
                                              le=100_000)
    long_polls_percent: int = setting("TIERQ_LONG_POLLS_PERCENT", 80, ge=1, le=100)

    # The PostgreSQL shards (tierq.dal.shards): TIERQ_SHARD_URLS (``name=url`` items, the
    # default first) wins; else, on AWS, TIERQ_SHARD_NAMES with each further shard's entry
    # under the Parameter Store path TIERQ_SHARD_DIRECTORY. Checked here, so that a bad list is
    # refused naming the variable before any connection.
    shard_urls: str = setting("TIERQ_SHARD_URLS", "", strip=True, check=_usable_shard_urls)
    shard_names: str = setting("TIERQ_SHARD_NAMES", "", strip=True, check=_usable_shard_names)
    shard_directory: str = setting("TIERQ_SHARD_DIRECTORY", "", strip=True)
    # The migrate function's check of a further shard's host: its proxy is named this
    # prefix and the shard's name (tierq.aws.custom_resource).
    shard_proxy_prefix: str = setting("TIERQ_SHARD_PROXY_PREFIX", "", strip=True)

    # A scheduled invocation's ticks (tierq.aws.scheduled): it returns after
    # TIERQ_TICK_MAX_SECONDS, or when less than TIERQ_TICK_SAFETY_SECONDS of its remaining
    # time is left; empty is the default.
    tick_max_seconds: float = setting("TIERQ_TICK_MAX_SECONDS", 55.0, ge=0,
                                      le=MAX_INVOCATION_SECONDS, finite=True,
                                      empty_is_default=True)
    tick_safety_seconds: float = setting("TIERQ_TICK_SAFETY_SECONDS", 10.0, ge=0,
                                         le=MAX_INVOCATION_SECONDS, finite=True,
                                         empty_is_default=True)

    # Lambda's and Powertools' variables that tierq reads too: the service and namespace of
    # logs and metrics, and what decides whether the X-Ray tracer exists
    # (tierq.aws.runtime.tracing_enabled, Powertools' own rule). Powertools reads its other
    # variables (POWERTOOLS_LOG_LEVEL, …) itself.
    aws_region: str = setting("AWS_REGION", "", strip=True)
    aws_default_region: str = setting("AWS_DEFAULT_REGION", "", strip=True)
    powertools_service_name: str = setting("POWERTOOLS_SERVICE_NAME", "tierq", min_length=1,
                                           max_length=255)
    # CloudWatch's rule for a namespace: 1-255 of these characters, not under AWS/
    powertools_metrics_namespace: str = setting("POWERTOOLS_METRICS_NAMESPACE", "Tierq",
                                                min_length=1, max_length=255,
                                                pattern=r"[0-9A-Za-z._/#: -]+",
                                                check=_not_aws_namespace)
    # true, 1, yes, on, t or y (any case) as Powertools' strtobool; false, 0, no, off, f, n
    powertools_trace_disabled: bool = setting("POWERTOOLS_TRACE_DISABLED", False)
    lambda_task_root: str = setting("LAMBDA_TASK_ROOT", "")  # set in Lambda
    aws_sam_local: str = setting("AWS_SAM_LOCAL", "")  # set by `sam local`
    aws_chalice_cli_mode: str = setting("AWS_CHALICE_CLI_MODE", "")
    # Lambda's: on-demand, provisioned-concurrency or snap-start (empty outside Lambda)
    aws_lambda_initialization_type: str = setting("AWS_LAMBDA_INITIALIZATION_TYPE", "")

    def __init__(self, **given: Any) -> None:
        self._read(os.environ, given)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], **given: Any) -> "Settings":
        """The settings of ``environ`` (not the process environment) and ``given``."""
        settings = cls.__new__(cls)
        settings._read(environ, given)
        return settings

    def replace(self, **changes: Any) -> "Settings":
        """A copy with ``changes`` (by field or variable name), checked as a new one is."""
        unknown = changes.keys() - self.fields.keys() - {
            row.variable for row in self.fields.values()}
        if unknown:
            raise TypeError(f"Settings has no field {', '.join(sorted(unknown))}")
        return self.from_environ({}, **{**vars(self), **changes})

    def _read(self, environ: Mapping[str, str], given: Mapping[str, Any]) -> None:
        environment = {name.upper(): value for name, value in environ.items()}
        problems: list[str] = []
        refused: set[str] = set()
        for name, row in self.fields.items():
            if row.variable in given:
                value = given[row.variable]
            elif name in given:
                value = given[name]
            elif (value := environment.get(row.variable)) is None:
                setattr(self, name, row.default)
                continue
            try:
                setattr(self, name, row.parse(value))
            except ValueError as exc:
                problems.append(str(exc))
                refused.add(name)
        problems.extend(self._broken_rules(refused))
        if problems:
            raise SettingsError(problems)

    def _broken_rules(self, refused: set[str]) -> Iterator[str]:
        """What the values break together; a rule reading a refused value is not checked."""

        def sound(*names: str) -> bool:
            return refused.isdisjoint(names)

        # an upload still allowed by its URL must not be swept as never enqueued
        if sound("payload_url_seconds", "payload_pending_seconds") \
                and self.payload_pending_seconds <= self.payload_url_seconds:
            yield (f"TIERQ_PAYLOAD_PENDING_SECONDS ({self.payload_pending_seconds}) must be "
                   f"longer than TIERQ_PAYLOAD_URL_SECONDS ({self.payload_url_seconds}), how "
                   "long an upload URL lives")
        # libpq accepts sslrootcert=system only with verify-full (a public CA signs for
        # anyone's host names, so checking the chain alone would prove nothing)
        if sound("db_sslrootcert", "db_sslmode") and self.db_sslrootcert == "system" \
                and self.db_sslmode == "verify-ca":
            yield "DB_SSLROOTCERT=system needs DB_SSLMODE=verify-full"
        if sound("valkey_iam_user", "valkey_cache_name") and self.valkey_iam_user \
                and not self.valkey_cache_name:
            yield ("VALKEY_IAM_USER needs VALKEY_CACHE_NAME (the serverless cache the IAM "
                   "token is signed for)")
        # (a lock wait is part of its statement: a longer lock timeout would never fire)
        if sound("statement_timeout_ms", "lock_timeout_ms") and self.statement_timeout_ms \
                and self.lock_timeout_ms > self.statement_timeout_ms:
            yield (f"TIERQ_LOCK_TIMEOUT_MS ({self.lock_timeout_ms}) must not exceed "
                   f"TIERQ_STATEMENT_TIMEOUT_MS ({self.statement_timeout_ms})")
        # (a committer of gathered acks holds its lock for its statement's time at most: a
        # statement without a limit could outlive the lock and answer acks twice)
        if sound("ack_group_commit", "statement_timeout_ms") and self.ack_group_commit \
                and not self.statement_timeout_ms:
            yield ("TIERQ_ACK_GROUP_COMMIT=true needs TIERQ_STATEMENT_TIMEOUT_MS > 0 (0 is no "
                   "limit, and a committer's lock lasts its statement's time at most): leave "
                   "TIERQ_ACK_GROUP_COMMIT unset or set it false")
        if sound("backoff_base_seconds", "backoff_cap_seconds") \
                and self.backoff_cap_seconds < self.backoff_base_seconds:
            yield "TIERQ_BACKOFF_CAP_SECONDS must be >= TIERQ_BACKOFF_BASE_SECONDS"

    @property
    def gathers_acks(self) -> bool:
        """Whether plain acks of one (queue, tenant) are committed together
        (``ack_group_commit``; unset: wherever a statement timeout bounds the committer)."""
        if self.ack_group_commit is None:
            return self.statement_timeout_ms > 0
        return self.ack_group_commit

    def __setattr__(self, name: str, value: Any) -> None:
        # (a misspelt name is refused, not kept beside the settings)
        if name not in self.fields:
            raise AttributeError(f"Settings has no field {name!r}")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.fields)
        return f"Settings({values})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Settings):
            return NotImplemented
        return vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]  # (mutable, as its values may be set)

    @property
    def region(self) -> str:
        """The AWS region of the process (AWS_REGION, else AWS_DEFAULT_REGION; empty when
        neither is set)."""
        return self.aws_region or self.aws_default_region

    @property
    def long_polls_cap(self) -> int:
        """Long polls of all callers in flight at once (0: no cap): the share
        ``long_polls_percent`` of the claim function's reserved concurrency, at least 1."""
        if not self.claim_reserved_concurrency:
            return 0
        return max(1, self.claim_reserved_concurrency * self.long_polls_percent // 100)

    def tenant_warm_bound(self, capacity_bytes: int) -> int:
        """The bytes one tenant may hold warm (0: no bound): TIERQ_TENANT_WARM_MAX_BYTES if
        set, else ``capacity_bytes`` (the warm tier's, 0 when unknown) times
        TENANT_WARM_SHARE, at least TENANT_WARM_MIN_BYTES."""
        if self.tenant_warm_max_bytes is not None:
            return self.tenant_warm_max_bytes
        if capacity_bytes <= 0:
            return 0
        return max(TENANT_WARM_MIN_BYTES, int(capacity_bytes * TENANT_WARM_SHARE))


@lru_cache(maxsize=1)
def get_settings() -> "Settings":
    """The process-wide settings, read once."""
    return Settings()
