"""Deployment settings, read from the environment once.

Per-queue settings stored in Postgres (``tierq_queues``) override the defaults here.

A plain pydantic model reads the variables itself (each field's alias, matched without
regard to case, as pydantic-settings did): pydantic-settings cost every Lambda function
about 40 ms of its cold import for this one class.

The engine and ``tierq.aws`` read every variable through this model (a unit test,
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


import os
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

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


class Settings(BaseModel):
    """Everything the engine and ``tierq.aws`` read from the environment (the module's
    table lists what is read elsewhere, and why).

    ``Settings()`` reads the process environment; keyword arguments (by field name or by
    variable name) take precedence over it. ``Settings.from_environ(mapping)`` reads that
    mapping instead of the process environment.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], **given: Any) -> "Settings":
        """The settings of ``environ`` (not the process environment) and ``given``."""
        return cls.model_validate(given, context={"environ": environ})

    @model_validator(mode="before")
    @classmethod
    def _read_environment(cls, given: Any, info: ValidationInfo) -> Any:
        if not isinstance(given, Mapping):
            return given
        values = dict(given)
        source = (info.context or {}).get("environ", os.environ)
        environment = {name.upper(): value for name, value in source.items()}
        for name, field in cls.model_fields.items():
            variable = field.alias or name
            if variable in values or name in values:
                continue
            if (value := environment.get(variable.upper())) is not None:
                values[variable] = value
        return values

    database_url: str | None = Field(default=None, alias="DATABASE_URL")
    # On AWS the database URL is built from a Secrets Manager secret and the proxy endpoint.
    db_secret_arn: str | None = Field(default=None, alias="DB_SECRET_ARN")
    db_host: str | None = Field(default=None, alias="DB_HOST")
    db_port: int = Field(default=5432, alias="DB_PORT")
    db_name: str = Field(default="tierq", alias="DB_NAME")
    # The application's login (every function but migrate, and the Glue job) comes from
    # DB_SECRET_ARN; the migrate function reads the owner's there and, from this one, the
    # application login it creates (see tierq.dal.migrate.ensure_app_login).
    db_app_secret_arn: str | None = Field(default=None, alias="DB_APP_SECRET_ARN")
    # TLS towards RDS Proxy, verifying its certificate and host name. The proxy presents an
    # ACM certificate, so the roots are the system's trust store (``system``), not the RDS
    # CA bundle; only tests against a local server without TLS lower the mode.
    db_sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = \
        Field(default="verify-full", alias="DB_SSLMODE")
    db_sslrootcert: str = Field(default="system", min_length=1, alias="DB_SSLROOTCERT")
    # Set per transaction (SET LOCAL) behind RDS Proxy, per session on a direct connection,
    # never per login or as a startup option (tierq.dal.postgres): a statement
    # running longer, or waiting longer for a lock, is cancelled (HTTP 503). Both stay well
    # below the HTTP functions' 29 s timeout; 0 means no limit.
    statement_timeout_ms: int = Field(default=15_000, ge=0, le=3_600_000,
                                      alias="TIERQ_STATEMENT_TIMEOUT_MS")
    lock_timeout_ms: int = Field(default=5_000, ge=0, le=3_600_000,
                                 alias="TIERQ_LOCK_TIMEOUT_MS")
    # The migrations' own lock waits (tierq.dal.migrate): a transactional migration gives
    # up a lock wait after this long, lets the writers queued behind it through, and tries
    # again after a growing pause, this many times in all.
    migrate_lock_timeout_ms: int = Field(default=5_000, ge=1, le=600_000,
                                         alias="TIERQ_MIGRATE_LOCK_TIMEOUT_MS")
    migrate_lock_attempts: int = Field(default=10, ge=1, le=1_000,
                                       alias="TIERQ_MIGRATE_LOCK_ATTEMPTS")
    db_pool_max: int = Field(default=10, ge=1, alias="TIERQ_DB_POOL_MAX")
    # How long a request waits for a pooled connection before it is answered 503. Once a
    # wait has run out, later ones wait at most a second until a checkout succeeds again.
    db_pool_timeout: float = Field(default=10.0, gt=0, alias="TIERQ_DB_POOL_TIMEOUT")

    # False lets acks commit without waiting for the WAL flush: faster, but a database crash
    # can forget the last few milliseconds of acks, and those tasks are delivered again
    # (never lost). The default waits: an ack that returned success is durable.
    ack_synchronous_commit: bool = Field(default=True, alias="TIERQ_ACK_SYNCHRONOUS_COMMIT")

    # Who a JWT caller is (tierq.aws.http.access): the claim naming its tenant, and the scope
    # that makes it an administrator (one whole word of the `scope` claim).
    tenant_claim: str = Field(default="tenant", max_length=128, alias="TIERQ_TENANT_CLAIM")
    admin_scope: str = Field(default="tierq/admin", max_length=256, alias="TIERQ_ADMIN_SCOPE")

    valkey_url: str | None = Field(default=None, alias="VALKEY_URL")
    valkey_cluster: bool = Field(default=False, alias="VALKEY_CLUSTER")
    # On AWS, tierq's ElastiCache user authenticates with IAM tokens signed for the serverless
    # cache (tierq.dal.valkey_auth); elsewhere a password comes in VALKEY_URL.
    valkey_iam_user: str | None = Field(default=None, alias="VALKEY_IAM_USER")
    valkey_cache_name: str | None = Field(default=None, alias="VALKEY_CACHE_NAME")
    valkey_iam_region: str | None = Field(default=None, alias="VALKEY_IAM_REGION")

    # Ready tasks the warm tier holds per (queue, tenant). The bytes below bound Valkey's
    # memory; this count only keeps each script's work per call bounded, which it is at this
    # size too (every script reads a pair's keys by id, by rank or in slices: lua/README.md),
    # and a larger one sends fewer tasks through the cold line (docs/architecture.md §3).
    warm_max: int = Field(default=50_000, ge=1, alias="TIERQ_WARM_MAX")
    # Bytes of task data (payload, key and a small envelope) the warm tier holds per
    # (queue, tenant); past it, tasks wait cold like past warm_max.
    warm_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, le=1 << 40,
                                alias="TIERQ_WARM_MAX_BYTES")
    # The warm tier's capacity in bytes (0: read from Valkey's ``maxmemory`` when Valkey
    # answers INFO and sets one; on AWS the template passes CacheMaxDataStorageGB here, since
    # ElastiCache refuses INFO and CONFIG to tierq's user). Sizes the tenants' bound below.
    warm_capacity_bytes: int = Field(default=0, ge=0, le=1 << 50,
                                     alias="TIERQ_WARM_CAPACITY_BYTES")
    # Bytes one tenant may hold in the warm tier over all its queues: its tasks' data plus
    # TENANT_TASK_CHARGE per task waiting or leased (logic/tenant_budget.py). Unset: a
    # quarter of the capacity (TENANT_WARM_SHARE); 0: no bound. At least 1 MiB when set.
    tenant_warm_max_bytes: int | None = Field(default=None, ge=0, le=1 << 50,
                                              alias="TIERQ_TENANT_WARM_MAX_BYTES")
    lease_seconds: int = Field(default=300, ge=1, le=43_200, alias="TIERQ_LEASE_SECONDS")
    max_attempts: int = Field(default=5, ge=1, le=1000, alias="TIERQ_MAX_ATTEMPTS")
    backoff_kind: Literal["fixed", "linear", "exponential"] = Field(
        default="exponential", alias="TIERQ_BACKOFF_KIND"
    )
    backoff_base_seconds: float = Field(default=2.0, ge=0, alias="TIERQ_BACKOFF_BASE_SECONDS")
    backoff_cap_seconds: float = Field(default=3600.0, ge=0, alias="TIERQ_BACKOFF_CAP_SECONDS")
    backoff_jitter: float = Field(default=0.1, ge=0, le=1, alias="TIERQ_BACKOFF_JITTER")
    retention_seconds: int = Field(default=7 * 86_400, ge=0, alias="TIERQ_RETENTION_SECONDS")
    # At most 1 MiB: a claim always hands out its first task, and one task whose payload is
    # all quotes doubles on the wire — 1 MiB keeps any single task far inside Lambda's 6 MB.
    max_payload_bytes: int = Field(default=256 * 1024, ge=1, le=1024 * 1024,
                                   alias="TIERQ_MAX_PAYLOAD_BYTES")
    # Big payloads (tierq.logic.payloads): the bucket that holds them (template.yaml's
    # PayloadBucket; unset: no offloading), or locally a folder (`tierq dev`: .local/payloads)
    # whose presigned-like URLs the local gateway serves (tierq.dal.payload_store).
    payload_bucket: str | None = Field(default=None, alias="TIERQ_PAYLOAD_BUCKET")
    payload_dir: str | None = Field(default=None, alias="TIERQ_PAYLOAD_DIR")
    # the largest payload one upload may carry (S3's single PUT takes 5 GiB; a Worker holds
    # a payload in memory), and how long a presigned URL lives
    max_offloaded_payload_bytes: int = Field(default=64 * 1024 * 1024, ge=1,
                                             le=5 * 1024 ** 3,
                                             alias="TIERQ_MAX_OFFLOADED_PAYLOAD_BYTES")
    payload_url_seconds: int = Field(default=900, ge=60, le=43_200,
                                     alias="TIERQ_PAYLOAD_URL_SECONDS")
    # an upload no task named within this long is deleted by the reaper (its key pending
    # since the presign; at most 30 days, well inside the bucket's lifecycle backstop), and
    # the most such uploads a tenant may have pending at once (a presign past it is 429)
    payload_pending_seconds: int = Field(default=86_400, ge=60, le=30 * 86_400,
                                         alias="TIERQ_PAYLOAD_PENDING_SECONDS")
    max_pending_payloads: int = Field(default=10_000, ge=1, le=10_000_000,
                                      alias="TIERQ_MAX_PENDING_PAYLOADS")

    reconcile_grace_seconds: float = Field(
        default=60.0, ge=0, alias="TIERQ_RECONCILE_GRACE_SECONDS"
    )
    # An admission registered in Valkey for longer than this belonged to a crashed caller.
    admission_stale_seconds: float = Field(
        default=60.0, gt=0, alias="TIERQ_ADMISSION_STALE_SECONDS"
    )
    cold_to_warm_every: float = Field(default=5.0, gt=0, alias="TIERQ_COLD_TO_WARM_EVERY")
    delayed_every: float = Field(default=1.0, gt=0, alias="TIERQ_DELAYED_EVERY")
    reaper_every: float = Field(default=5.0, gt=0, alias="TIERQ_REAPER_EVERY")
    cron_every: float = Field(default=10.0, gt=0, alias="TIERQ_CRON_EVERY")
    # The dispatcher (push delivery to consumer functions): the longest it waits before
    # looking again at a queue that had nothing ready.
    dispatcher_every: float = Field(default=1.0, gt=0, le=60, alias="TIERQ_DISPATCHER_EVERY")
    # The functions queues may name as consumers (the template's ConsumerFunctionArns): ARNs
    # (or, in the stack's account and region, names), comma separated; a consumer names one
    # by its ARN or, if it has TIERQ_CONSUMER_ARN_PREFIX, by the name that follows it.
    consumer_functions: str = Field(default="", alias="TIERQ_CONSUMER_FUNCTIONS")
    consumer_arn_prefix: str = Field(default="", alias="TIERQ_CONSUMER_ARN_PREFIX")
    # The dispatcher function that a task becoming ready wakes (tierq.logic.wake); empty: no
    # waking (the dispatcher's own function, and everything off AWS).
    dispatcher_function: str = Field(default="", alias="TIERQ_DISPATCHER_FUNCTION")
    # Sharded: how long a process trusts a pair's home it read. A pair's move waits this long
    # after closing the pair (tierq.logic.pair_moves), so it must be the same everywhere.
    home_cache_seconds: float = Field(default=300.0, ge=0, le=3600,
                                      alias="TIERQ_HOME_CACHE_SECONDS")
    # How long in-process caches of queue settings and tenant lists may be stale.
    settings_cache_seconds: float = Field(default=1.0, ge=0, alias="TIERQ_SETTINGS_CACHE_SECONDS")
    # How long an Idempotency-Key of an enqueue or a dead-letter replay is remembered (in
    # PostgreSQL; the reaper purges it after), and one of an ack, nack, release or heartbeat
    # (in Valkey, where a busy worker fleet's keys would otherwise fill the cache).
    idempotency_ttl_seconds: int = Field(default=86_400, ge=60,
                                         alias="TIERQ_IDEMPOTENCY_TTL_SECONDS")
    idempotency_valkey_ttl_seconds: int = Field(default=300, ge=60,
                                                alias="TIERQ_IDEMPOTENCY_VALKEY_TTL_SECONDS")

    # Maintenance by activity: each pass of the reaper and of the cold -> warm mover visits
    # the pairs with work in slices of this many, and stops starting new work once its time
    # budget is spent (the next pass goes on from there); below the 5 s ticks.
    maintenance_budget_seconds: float = Field(
        default=2.5, gt=0, le=MAINTENANCE_BUDGET_MAX_SECONDS,
        alias="TIERQ_MAINTENANCE_BUDGET_SECONDS")
    maintenance_slice: int = Field(default=200, ge=1, le=10_000, alias="TIERQ_MAINTENANCE_SLICE")
    # A (queue, tenant) without any row that nobody used for this long is forgotten.
    pair_retention_seconds: float = Field(
        default=30 * 86_400, ge=60, alias="TIERQ_PAIR_RETENTION_SECONDS")
    # Distinct queues a tenant may have (0: no cap); one more is 409 quota_exceeded.
    max_queues_per_tenant: int = Field(default=1000, ge=0, alias="TIERQ_MAX_QUEUES_PER_TENANT")
    # Cron schedules a tenant may have (0: no cap); a PUT of one more is 409 quota_exceeded
    # (replacing one of its schedules is not one more). Per database: on a sharded engine,
    # per shard.
    max_schedules_per_tenant: int = Field(default=1000, ge=0,
                                          alias="TIERQ_MAX_SCHEDULES_PER_TENANT")
    # The payload bytes one schedule keeps installed ahead (its occurrences not yet due):
    # occurrences x payload size. A PUT that would install more is 422; a tick installs at
    # most what fits (tierq.logic.schedules). The default holds the default horizon (4) of
    # the largest default payload (256 KiB), or 1,000 occurrences of 1 KiB.
    schedule_max_installed_bytes: int = Field(default=1024 * 1024, ge=1024, le=1024 ** 3,
                                              alias="TIERQ_SCHEDULE_MAX_INSTALLED_BYTES")
    # A tenant caller's own limits on the HTTP API (tierq.logic.tenant_limits), so that one
    # tenant meets them before the shared ones (the functions' reserved concurrency, whose
    # throttles reach every caller as 5xx): requests a second (a token bucket of this burst)
    # and long polls (claims with wait_seconds > 0) in flight. Past either: 429 with
    # Retry-After. 0: no limit. Admins are not limited by them.
    # The rate is 0 or at least TENANT_RATE_MIN (one request in 100 s): a smaller one would
    # ask for a Retry-After of hours and key lifetimes past what Valkey takes.
    tenant_requests_per_second: float = Field(default=100.0, ge=0, le=1_000_000,
                                              alias="TIERQ_TENANT_REQUESTS_PER_SECOND")
    tenant_requests_burst: int = Field(default=200, ge=1, le=1_000_000,
                                       alias="TIERQ_TENANT_REQUESTS_BURST")
    tenant_long_polls: int = Field(default=10, ge=0, le=100_000, alias="TIERQ_TENANT_LONG_POLLS")
    # Every caller's long polls in flight together are kept below the claim function's
    # reserved concurrency (template.yaml's ClaimReservedConcurrency; 0: none, no cap), at
    # TIERQ_LONG_POLLS_PERCENT of it, so the rest stays for claims that do not wait: past
    # it a long poll is 429 (tierq.logic.tenant_limits, Settings.long_polls_cap).
    claim_reserved_concurrency: int = Field(default=0, ge=0, le=100_000,
                                            alias="TIERQ_CLAIM_RESERVED_CONCURRENCY")
    long_polls_percent: int = Field(default=80, ge=1, le=100, alias="TIERQ_LONG_POLLS_PERCENT")

    # The PostgreSQL shards (tierq.dal.shards): TIERQ_SHARD_URLS (``name=url`` items, the
    # default first) wins; else, on AWS, TIERQ_SHARD_NAMES with each further shard's entry
    # under the Parameter Store path TIERQ_SHARD_DIRECTORY. Checked here, so that a bad list is
    # refused naming the variable before any connection.
    shard_urls: str = Field(default="", alias="TIERQ_SHARD_URLS")
    shard_names: str = Field(default="", alias="TIERQ_SHARD_NAMES")
    shard_directory: str = Field(default="", alias="TIERQ_SHARD_DIRECTORY")
    # The migrate function's check of a further shard's host: its proxy is named this
    # prefix and the shard's name (tierq.aws.custom_resource).
    shard_proxy_prefix: str = Field(default="", alias="TIERQ_SHARD_PROXY_PREFIX")

    # A scheduled invocation's ticks (tierq.aws.scheduled): it returns after
    # TIERQ_TICK_MAX_SECONDS, or when less than TIERQ_TICK_SAFETY_SECONDS of its remaining
    # time is left; empty is the default.
    tick_max_seconds: float = Field(default=55.0, ge=0, le=MAX_INVOCATION_SECONDS,
                                    allow_inf_nan=False, alias="TIERQ_TICK_MAX_SECONDS")
    tick_safety_seconds: float = Field(default=10.0, ge=0, le=MAX_INVOCATION_SECONDS,
                                       allow_inf_nan=False, alias="TIERQ_TICK_SAFETY_SECONDS")

    # Lambda's and Powertools' variables that tierq reads too: the service and namespace of
    # logs and metrics, and what decides whether the X-Ray tracer exists
    # (tierq.aws.runtime.tracing_enabled, Powertools' own rule). Powertools reads its other
    # variables (POWERTOOLS_LOG_LEVEL, …) itself.
    aws_region: str = Field(default="", alias="AWS_REGION")
    aws_default_region: str = Field(default="", alias="AWS_DEFAULT_REGION")
    powertools_service_name: str = Field(default="tierq", min_length=1, max_length=255,
                                         alias="POWERTOOLS_SERVICE_NAME")
    # CloudWatch's rule for a namespace: 1-255 of these characters, not under AWS/
    powertools_metrics_namespace: str = Field(default="Tierq", min_length=1, max_length=255,
                                              pattern=r"^[0-9A-Za-z._/#: -]+$",
                                              alias="POWERTOOLS_METRICS_NAMESPACE")
    # true, 1, yes, on, t or y (any case) as Powertools' strtobool; false, 0, no, off, f, n
    powertools_trace_disabled: bool = Field(default=False, alias="POWERTOOLS_TRACE_DISABLED")
    lambda_task_root: str = Field(default="", alias="LAMBDA_TASK_ROOT")  # set in Lambda
    aws_sam_local: str = Field(default="", alias="AWS_SAM_LOCAL")  # set by `sam local`
    aws_chalice_cli_mode: str = Field(default="", alias="AWS_CHALICE_CLI_MODE")
    # Lambda's: on-demand, provisioned-concurrency or snap-start (empty outside Lambda)
    aws_lambda_initialization_type: str = Field(default="",
                                                alias="AWS_LAMBDA_INITIALIZATION_TYPE")

    @property
    def region(self) -> str:
        """The AWS region of the process (AWS_REGION, else AWS_DEFAULT_REGION; empty when
        neither is set)."""
        return self.aws_region or self.aws_default_region

    @field_validator("shard_urls", "shard_names", "shard_directory", "shard_proxy_prefix",
                     "aws_region", "aws_default_region")
    @classmethod
    def _stripped(cls, value: str) -> str:
        return value.strip()

    @field_validator("shard_urls", "shard_names")
    @classmethod
    def _usable_shards(cls, value: str, info: ValidationInfo) -> str:
        # ShardConfigError names TIERQ_SHARD_URLS or TIERQ_SHARD_NAMES and the item
        if value:
            from tierq.dal import shards  # (a sharded deployment's only)

            parse = (shards.parse_shard_urls if info.field_name == "shard_urls"
                     else shards.parse_shard_names)
            parse(value)
        return value

    @field_validator("payload_pending_seconds")
    @classmethod
    def _pending_outlives_its_url(cls, value: int, info: ValidationInfo) -> int:
        # an upload still allowed by its URL must not be swept as never enqueued
        url = info.data.get("payload_url_seconds")
        if url is not None and value <= url:
            raise ValueError(f"TIERQ_PAYLOAD_PENDING_SECONDS ({value}) must be longer than "
                             f"TIERQ_PAYLOAD_URL_SECONDS ({url}), how long an upload URL "
                             "lives")
        return value

    @field_validator("tick_max_seconds", "tick_safety_seconds", mode="before")
    @classmethod
    def _empty_is_the_default(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str) and not value.strip():
            assert info.field_name is not None
            return cls.model_fields[info.field_name].default
        return value

    @field_validator("powertools_metrics_namespace")
    @classmethod
    def _not_aws_namespace(cls, value: str) -> str:
        if value.startswith("AWS/"):
            raise ValueError(f"POWERTOOLS_METRICS_NAMESPACE must not start with AWS/ "
                             f"(CloudWatch reserves it), got {value!r}")
        return value

    @property
    def long_polls_cap(self) -> int:
        """Long polls of all callers in flight at once (0: no cap): the share
        ``long_polls_percent`` of the claim function's reserved concurrency, at least 1."""
        if not self.claim_reserved_concurrency:
            return 0
        return max(1, self.claim_reserved_concurrency * self.long_polls_percent // 100)

    @field_validator("tenant_requests_per_second")
    @classmethod
    def _a_usable_rate(cls, value: float) -> float:
        if 0 < value < TENANT_RATE_MIN:
            raise ValueError(f"TIERQ_TENANT_REQUESTS_PER_SECOND must be 0 (no limit) or at "
                             f"least {TENANT_RATE_MIN:g}, got {value:g}")
        return value

    @field_validator("tenant_warm_max_bytes", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # (the template passes its parameter as given: empty when not set)
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("tenant_warm_max_bytes")
    @classmethod
    def _a_bound_that_holds_a_task(cls, value: int | None) -> int | None:
        # a bound below one large task would keep a tenant's every queue cold for good
        if value is not None and 0 < value < TENANT_WARM_MIN_BYTES:
            raise ValueError(f"TIERQ_TENANT_WARM_MAX_BYTES must be 0 (no bound) or at least "
                             f"{TENANT_WARM_MIN_BYTES} (1 MiB), got {value}")
        return value

    def tenant_warm_bound(self, capacity_bytes: int) -> int:
        """The bytes one tenant may hold warm (0: no bound): TIERQ_TENANT_WARM_MAX_BYTES if
        set, else ``capacity_bytes`` (the warm tier's, 0 when unknown) times
        TENANT_WARM_SHARE, at least TENANT_WARM_MIN_BYTES."""
        if self.tenant_warm_max_bytes is not None:
            return self.tenant_warm_max_bytes
        if capacity_bytes <= 0:
            return 0
        return max(TENANT_WARM_MIN_BYTES, int(capacity_bytes * TENANT_WARM_SHARE))

    @field_validator("tenant_claim", "admin_scope")
    @classmethod
    def _one_word(cls, value: str, info: ValidationInfo) -> str:
        # a claim name or a scope is one word: blank or spaced values would match nothing
        # (or, for a scope, several words of the scope claim)
        if re.fullmatch(r"\S+", value) is None:
            raise ValueError(f"{info.field_name} must be one word without spaces, got "
                             f"{value!r}")
        return value

    @model_validator(mode="after")
    def _system_roots_verify_host(self) -> "Settings":
        # libpq accepts sslrootcert=system only with verify-full (a public CA signs for
        # anyone's host names, so checking the chain alone would prove nothing)
        if self.db_sslrootcert == "system" and self.db_sslmode == "verify-ca":
            raise ValueError("DB_SSLROOTCERT=system needs DB_SSLMODE=verify-full")
        return self

    @model_validator(mode="after")
    def _iam_user_names_its_cache(self) -> "Settings":
        if self.valkey_iam_user and not self.valkey_cache_name:
            raise ValueError("VALKEY_IAM_USER needs VALKEY_CACHE_NAME (the serverless cache "
                             "the IAM token is signed for)")
        return self

    @model_validator(mode="after")
    def _lock_timeout_within_statement_timeout(self) -> "Settings":
        # (a lock wait is part of its statement: a longer lock timeout would never fire)
        if self.statement_timeout_ms and self.lock_timeout_ms > self.statement_timeout_ms:
            raise ValueError(
                f"TIERQ_LOCK_TIMEOUT_MS ({self.lock_timeout_ms}) must not exceed "
                f"TIERQ_STATEMENT_TIMEOUT_MS ({self.statement_timeout_ms})")
        return self

    @model_validator(mode="after")
    def _backoff_cap_not_below_base(self) -> "Settings":
        if self.backoff_cap_seconds < self.backoff_base_seconds:
            raise ValueError("TIERQ_BACKOFF_CAP_SECONDS must be >= TIERQ_BACKOFF_BASE_SECONDS")
        return self


@lru_cache(maxsize=1)
def get_settings() -> "Settings":
    """The process-wide settings, read once."""
    return Settings()
