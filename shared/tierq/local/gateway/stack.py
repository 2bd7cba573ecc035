"""The whole local stack behind ``tierq dev``: PostgreSQL and Valkey (private servers unless
told otherwise), migrations, the HTTP API on 127.0.0.1 and the scheduled functions — all
from template.yaml, running the same handler code as on AWS, without Docker.

Bound to a loopback address the API lets requests without the ``x-tierq-jwt-claims`` header
through as an admin-like local caller; bound elsewhere it requires the header (see
:mod:`tierq.local.gateway.http`)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from tierq.config import get_settings
from tierq.dal.migrate import migrate
from tierq.dal.payload_store import set_local_base_url
from tierq.dal.shards import SHARD_URLS, ShardConfigError, ShardSpec, parse_shard_urls
from tierq.local.gateway.http import LocalApi, LocalHttpServer
from tierq.local.gateway.lambdas import LocalFunction
from tierq.local.gateway.scheduler import LocalScheduler
from tierq.local.gateway.template import Template
from tierq.local.services import LocalServices, ensure_services, repo_root
from tierq.local.services.process import redact
from tierq.logic import wake
from tierq.logic.homes import HomeConflict, ShardDown
from tierq.maintenance.dispatcher import forget_dispatcher
from tierq.shard_migrations import migrate_shards
from tierq.sharded import ShardMigrationFailed

# What the local process sets unless the environment already does.
DEV_DEFAULTS = {
    "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
    "POWERTOOLS_METRICS_DISABLED": "true",  # EMF lines would only clutter the terminal
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "POWERTOOLS_SERVICE_NAME": "tierq",
    "POWERTOOLS_METRICS_NAMESPACE": "Tierq",
    # every function shares one process (and one engine) here, unlike on Lambda where each
    # execution environment has its own small pool
    "TIERQ_DB_POOL_MAX": "16",
}
# Template variables that name AWS resources: locally the stores come from the services.
NOT_FROM_TEMPLATE = frozenset({
    "DATABASE_URL", "VALKEY_URL", "VALKEY_CLUSTER", "DB_SECRET_ARN", "DB_HOST", "DB_PORT",
    "DB_NAME", "DB_SSLMODE", "POWERTOOLS_LOG_LEVEL", "POWERTOOLS_METRICS_DISABLED",
    "TIERQ_DB_POOL_MAX", "TIERQ_SHARD_NAMES", "TIERQ_SHARD_DIRECTORY",
})


class GatewayStackError(RuntimeError):
    """The local stack cannot start."""


@dataclass
class DevOptions:
    host: str = "127.0.0.1"
    port: int = 3000
    services: bool = True  # False: use DATABASE_URL / VALKEY_URL as given
    schedules: bool = True
    schedule_period: float | None = None  # None: each schedule's own rate
    template: Path | None = None
    access_log: bool = True
    valkey_cluster: bool = False  # Valkey as a cluster, like ElastiCache Serverless
    # the bearer token a non-loopback server requires (None: TIERQ_DEV_TOKEN, else random)
    access_token: str | None = None


def shard_values(environ: Mapping[str, str]) -> dict[str, str]:
    """The template's shard parameters for the shards the local stack is given
    (``TIERQ_SHARD_URLS``, the first being the default shard), so that its ``Fn::ForEach``
    loops expand for them; none without."""
    text = environ.get(SHARD_URLS, "").strip()
    if not text:
        return {}
    try:
        names = [spec.name for spec in parse_shard_urls(text)]
    except ShardConfigError as exc:
        raise GatewayStackError(str(exc)) from exc
    return {"DefaultShardName": names[0], "ExtraShardNames": ",".join(names[1:])}


def say(message: str) -> None:
    print(f"tierq dev: {message}", flush=True)


class DevStack:
    def __init__(self, options: DevOptions, *, out: Callable[[str], None] = say) -> None:
        self.options = options
        self.say = out
        self.services: LocalServices | None = None
        self.server: LocalHttpServer | None = None
        self.scheduler: LocalScheduler | None = None
        self.functions: dict[str, LocalFunction] = {}
        self.template: Template | None = None

    @property
    def url(self) -> str:
        if self.server is None:
            raise GatewayStackError("not started")
        return self.server.url

    def _stores(self) -> None:
        shards = self._shards()
        if self.options.services:
            if shards:
                raise GatewayStackError(
                    f"{SHARD_URLS} names databases of your own: run with --no-services (and "
                    "VALKEY_URL), or unset it for one private database")
            self.services = ensure_services(valkey_cluster=self.options.valkey_cluster)
            os.environ.update(self.services.env())
            if not self.services.valkey.cluster:  # whatever the shell said
                os.environ.pop("VALKEY_CLUSTER", None)
        else:
            needed = ("VALKEY_URL",) if shards else ("DATABASE_URL", "VALKEY_URL")
            missing = [n for n in needed if not os.environ.get(n)]
            if missing:
                raise GatewayStackError(f"--no-services needs {' and '.join(missing)} set"
                                        + ("" if shards else f" (or {SHARD_URLS})"))
            if self.options.valkey_cluster:
                os.environ["VALKEY_CLUSTER"] = "true"
        if os.environ.pop("DB_SECRET_ARN", None):
            self.say("ignoring DB_SECRET_ARN: the local stack uses "
                     + (SHARD_URLS if shards else "DATABASE_URL"))
        if not shards:
            self.say(f"PostgreSQL {redact(os.environ['DATABASE_URL'])}")
        for spec in shards:
            self.say(f"PostgreSQL shard {spec.name}: {redact(spec.url)}")
        cluster = " (cluster)" if os.environ.get("VALKEY_CLUSTER", "").lower() in (
            "true", "1", "yes", "on") else ""
        self.say(f"Valkey     {redact(os.environ['VALKEY_URL'])}{cluster}")
        if shards:
            self._migrate_shards(shards)
            return
        applied = migrate(os.environ["DATABASE_URL"])
        self.say(f"migrations applied: {', '.join(applied)}" if applied
                 else "database schema is up to date")

    def _shards(self) -> list[ShardSpec]:
        """The shards of TIERQ_SHARD_URLS (none when unset: DATABASE_URL is the database)."""
        text = os.environ.get(SHARD_URLS, "").strip()
        try:
            return parse_shard_urls(text) if text else []
        except ShardConfigError as exc:
            raise GatewayStackError(str(exc)) from None

    def _migrate_shards(self, shards: list[ShardSpec]) -> None:
        """Every shard migrated (one that fails tried again), then put in service together;
        the stack does not start while a shard is behind."""
        try:
            migrate_shards(shards, say=self.say)
        except ShardMigrationFailed as exc:
            raise GatewayStackError(
                "migrations failed on " + "; ".join(
                    f"shard {name}: {error}" for name, error in exc.failed.items())
                + " (the other shards are migrated; start again once it answers)") from None
        except (ShardDown, HomeConflict) as exc:
            raise GatewayStackError(f"putting the shards in service failed: {exc}") from None

    def _environment(self, template: Template) -> None:
        for name, value in DEV_DEFAULTS.items():
            os.environ.setdefault(name, value)
        for spec in template.functions.values():
            for name, value in spec.environment.items():
                if name not in NOT_FROM_TEMPLATE:
                    os.environ.setdefault(name, value)
        # big payloads: a folder stands in for the payload bucket (tierq.dal.payload_store)
        if not os.environ.get("TIERQ_PAYLOAD_BUCKET"):
            os.environ.setdefault("TIERQ_PAYLOAD_DIR",
                                  str(template.path.parent / ".local" / "payloads"))
        get_settings.cache_clear()

    def start(self) -> None:
        path = self.options.template or repo_root() / "template.yaml"
        if not path.is_file():
            raise GatewayStackError(f"no template at {path} (run from the repository, or pass "
                                "--template)")
        template = Template.load(path, shard_values(os.environ))
        self.template = template
        root = path.parent
        self._stores()
        self._environment(template)
        self.functions = {lid: LocalFunction(spec, root)
                          for lid, spec in template.functions.items()}
        # consumers: the template's functions and module:function, called in-process
        from tierq.aws.runtime import use_consumers
        from tierq.local.consumers import LocalFunctions  # (it imports this package)

        use_consumers(LocalFunctions(template_functions=self.functions))
        for function in self.functions.values():
            function.load()
            if function.error:
                self.say(f"function {function.spec.logical_id} is unavailable: {function.error}")
        api = LocalApi(template.routes, self.functions,
                       access_token=self.options.access_token
                       or os.environ.get("TIERQ_DEV_TOKEN") or None)
        try:
            self.server = LocalHttpServer(self.options.host, self.options.port, api,
                                          access_log=self.options.access_log)
        except OSError as exc:
            raise GatewayStackError(f"cannot listen on {self.options.host}:{self.options.port}: "
                                f"{exc.strerror or exc}; pick another --port") from exc
        self.server.start()
        set_local_base_url(self.server.url)  # the local payload store's URLs point here
        http_functions = sorted({self.functions[r.function].spec.name for r in template.routes})
        self.say(f"{len(template.routes)} routes -> {', '.join(http_functions)}")
        if self.options.schedules and template.schedules:
            self.scheduler = LocalScheduler(template.schedules, self.functions,
                                            period=self.options.schedule_period)
            self.scheduler.start()
            scheduler = self.scheduler
            # a task of a queue with a consumer became ready while no dispatcher runs
            def wake_dispatcher() -> None:
                scheduler.trigger("dispatcher")

            wake.install(wake_dispatcher)
            for run in self.scheduler.runs:
                state = "" if run.thread is not None else " (off: function unavailable)"
                self.say(f"schedule {run.spec.name}: {run.function.spec.name} every "
                         f"{run.period:g}s ({run.spec.expression}){state}")
        self.say(f"API        {self.server.url}")
        if self.server.loopback:
            self.say("access     requests without the x-tierq-jwt-claims header act as an "
                     "admin (loopback only)")
        else:
            self.say(f"access     {self.options.host} is not a loopback address: every API "
                     "route requires 'Authorization: Bearer <token>' (401 without it); "
                     "with it, the x-tierq-jwt-claims header's claims, or an admin's reach "
                     "without the header")
            token = self.server.api.access_token
            given = self.options.access_token or os.environ.get("TIERQ_DEV_TOKEN")
            self.say("token      " + ("TIERQ_DEV_TOKEN's" if token == given else str(token)))
        self.say(f"dashboard  {self.server.url}/dashboard")
        self.say(f"OpenAPI    {self.server.url}/v1/openapi.json")

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        wake.install(None)
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        if "tierq.aws.runtime" in sys.modules:
            from tierq.aws.runtime import reset_engine, shard_engines, use_consumers

            for tq in shard_engines().values():  # (each shard's engine has a dispatcher)
                forget_dispatcher(tq.ctx)
            reset_engine()
            use_consumers(None)
        if self.services is not None:
            self.services.stop()
            self.services = None

    def serve_until_signalled(self) -> None:
        """Run until SIGINT (Ctrl-C) or SIGTERM, then stop cleanly."""
        stopping = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stopping.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.say("running; Ctrl-C to stop")
            while not stopping.wait(0.5):
                pass
            self.say("stopping...")
        finally:
            self.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.say("stopped")
