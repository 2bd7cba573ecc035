"""Consumer functions on AWS: Lambda functions of the stack's allow-list, invoked
synchronously by the dispatcher, and the wake of the dispatcher itself.

The allow-list is the template's ``ConsumerFunctionArns`` (``TIERQ_CONSUMER_FUNCTIONS``):
ARNs of functions (``…:function:name`` or ``…:function:name:alias``); a queue's consumer
names one by its ARN or, in the stack's account and region, by its name (what follows
``TIERQ_CONSUMER_ARN_PREFIX``). The dispatcher's role may invoke exactly those.

An invoke is made once: botocore's retries are off (``total_max_attempts=1``), since a
retried invoke of a batch still running would run it twice; its read timeout is past the
function's timeout (``Consumer.read_timeout``), so the answer of a function that ran to its
timeout is read, not cut off. Lambda's answers map onto :class:`Invocation`:

============================================================  ==================  ==========
Lambda's answer                                               outcome             ``error``
============================================================  ==================  ==========
200 without ``FunctionError``                                 ``ok``              —
200 with ``FunctionError`` (raised, timed out, no memory)     ``function_error``  errorType
``TooManyRequestsException``, ``EC2ThrottledException``       ``throttled``       the code
``ServiceException`` (500), a connection lost after the       ``failed``          the code or
request went out (whether it ran is unknown: the batch is                         the class
nacked, so retries and max_attempts apply)
any other error (no such function, access denied, request     ``not_invoked``     the code or
too large, function not ready or being updated, its VPC or                        the class
KMS set-up failing …), a connection never made
============================================================  ==================  ==========

``error`` is a name only (the function's ``errorType``, else the ``X-Amz-Function-Error``
header; the AWS error code; the botocore exception's class), since the dispatcher may store
it on the batch's tasks; the function's ``errorMessage`` and botocore's messages, which
carry records, endpoint URLs, ARNs and the account id, go to ``detail``, which the
dispatcher writes to its log only (the function's traceback is in the function's own log,
where Lambda's runtime writes it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from tierq.config import Settings
from tierq.logic.context import Context
from tierq.logic.dispatch import (
    DEFAULT_ACCOUNT,
    DEFAULT_REGION,
    AllowList,
    Invocation,
    allow_list,
    function_error_message,
    function_error_type,
)

log = logging.getLogger(__name__)

THROTTLED = frozenset({"TooManyRequestsException", "EC2ThrottledException"})
UNKNOWN_OUTCOME = frozenset({"ServiceException"})
# the longest timeout a Lambda function may have: what a function whose configuration
# cannot be read is taken to have (its lease is then the longest)
LAMBDA_MAX_TIMEOUT = 900.0
CONNECT_TIMEOUT = 5.0
# A NAT gateway or VPC endpoint drops a connection idle for 350 s, and an invoke's
# connection is idle for as long as the function runs (up to 900 s). botocore's
# tcp_keepalive only turns SO_KEEPALIVE on, whose first probe Linux sends after 7200 s:
# these make it probe after 60 s of silence, every 30 s.
KEEPALIVE_IDLE_SECONDS = 60
KEEPALIVE_INTERVAL_SECONDS = 30
KEEPALIVE_PROBES = 5

ClientFactory = Callable[[float], Any]  # read timeout -> a boto3 Lambda client


def lambda_client(read_timeout: float, *, retries: int = 1,
                  connect_timeout: float = CONNECT_TIMEOUT) -> Any:
    """A boto3 Lambda client that makes ``retries`` attempts of a call and waits
    ``read_timeout`` seconds for an answer."""
    import boto3  # type: ignore[import-untyped]
    from botocore.config import Config

    config = Config(read_timeout=read_timeout, connect_timeout=connect_timeout,
                    retries={"total_max_attempts": retries, "mode": "standard"},
                    tcp_keepalive=True, max_pool_connections=100)
    client = boto3.client("lambda", config=config)
    keep_alive_through_nat(client)
    return client


def keepalive_socket_options() -> list[tuple[int, int, int]]:
    """Socket options that probe an idle connection well within 350 s (where the
    platform has them: Linux, as Lambda's is)."""
    import socket

    wanted = (("TCP_KEEPIDLE", KEEPALIVE_IDLE_SECONDS),
              ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_SECONDS), ("TCP_KEEPCNT", KEEPALIVE_PROBES))
    return [(socket.IPPROTO_TCP, getattr(socket, name), value) for name, value in wanted
            if hasattr(socket, name)]


def keep_alive_through_nat(client: Any) -> None:
    """Make the connections ``client`` opens from now on probe after 60 s of silence.
    botocore has no setting for it: its HTTP session shares one list of socket options
    with its connection pools, extended here in place before any connection is made."""
    options = getattr(getattr(getattr(client, "_endpoint", None), "http_session", None),
                      "_socket_options", None)
    if not isinstance(options, list):
        log.warning("botocore's socket options were not found: an invoke that runs past "
                    "350 s behind a NAT gateway or VPC endpoint may lose its answer")
        return
    options.extend(o for o in keepalive_socket_options() if o not in options)


def region_and_account(settings: Settings) -> tuple[str, str]:
    """The region and account of TIERQ_CONSUMER_ARN_PREFIX
    (``arn:<partition>:lambda:<region>:<account>:function:``); without one, AWS_REGION's."""
    parts = settings.consumer_arn_prefix.split(":")
    if len(parts) >= 5 and parts[0] == "arn" and parts[3] and parts[4]:
        return parts[3], parts[4]
    return settings.aws_region or DEFAULT_REGION, DEFAULT_ACCOUNT


@dataclass
class LambdaFunctions:
    """Consumers that are Lambda functions of the allow-list."""

    allowed: AllowList
    client_factory: ClientFactory = lambda_client
    region: str = DEFAULT_REGION
    account: str = DEFAULT_ACCOUNT
    _clients: dict[int, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_settings(cls, settings: Settings,
                      client_factory: ClientFactory = lambda_client) -> LambdaFunctions:
        region, account = region_and_account(settings)
        return cls(AllowList(allow_list(settings.consumer_functions),
                             settings.consumer_arn_prefix),
                   client_factory=client_factory, region=region, account=account)

    def client(self, read_timeout: float) -> Any:
        seconds = max(1, int(read_timeout + 0.999))
        with self._lock:
            found = self._clients.get(seconds)
            if found is None:
                found = self._clients[seconds] = self.client_factory(float(seconds))
            return found

    def check(self, function: str) -> None:
        self.allowed.check(function)

    def timeout_seconds(self, function: str) -> float:
        try:
            answer = self.client(30.0).get_function_configuration(FunctionName=function)
            return float(answer["Timeout"])
        except Exception:
            log.warning("reading the timeout of %s failed; taking Lambda's longest (%gs)",
                        function, LAMBDA_MAX_TIMEOUT, exc_info=True)
            return LAMBDA_MAX_TIMEOUT

    def invoke(self, function: str, event: bytes, *, read_timeout: float) -> Invocation:
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            ReadTimeoutError,
        )

        try:
            self.allowed.check(function)  # the allow-list may have shrunk since it was set
        except Exception as exc:
            return Invocation("not_invoked", error=type(exc).__name__, detail=str(exc))
        try:
            answer = self.client(read_timeout).invoke(
                FunctionName=function, InvocationType="RequestResponse", Payload=event)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", "")) or type(exc).__name__
            detail = f"{code}: {error.get('Message', '')}"
            if code in THROTTLED:
                return Invocation("throttled", error=code, detail=detail)
            if code in UNKNOWN_OUTCOME:
                return Invocation("failed", error=code, detail=detail)
            return Invocation("not_invoked", error=code, detail=detail)
        except (ConnectTimeoutError, EndpointConnectionError) as exc:
            return Invocation("not_invoked", error=type(exc).__name__, detail=str(exc))
        except (ReadTimeoutError, ConnectionClosedError) as exc:
            return Invocation("failed", error=type(exc).__name__, detail=str(exc))
        except Exception as exc:  # the request may have gone out: the outcome is unknown
            return Invocation("failed", error=type(exc).__name__, detail=str(exc))
        payload = answer["Payload"].read()
        if answer.get("FunctionError"):
            return Invocation("function_error", payload=payload,
                              error=function_error_type(str(answer["FunctionError"]), payload),
                              detail=function_error_message(payload))
        return Invocation("ok", payload=payload)


WAKE_EVENT = orjson.dumps({"source": "tierq.wake", "job": "dispatcher"})


# An asynchronous invoke is answered at once (202): a wake costs its request one short
# round trip, and at most this long when Lambda is slow to answer.
WAKE_TIMEOUT_SECONDS = 2.0


@dataclass
class LambdaWaker:
    """Wakes the dispatcher function with an asynchronous invoke, sent before the request
    that made the task ready returns: Lambda freezes an execution environment once its
    handler has answered, so a wake left to a thread of its own could wait for that
    environment's next request (the wake flag holding off every other meanwhile). The
    invoke carries no X-Ray trace header (botocore adds the caller's in a Lambda function):
    each dispatcher invocation starts a trace of its own rather than continuing a chain of
    calls, which is what Lambda's recursive loop detection counts."""

    function: str
    client: Any = None

    def __post_init__(self) -> None:
        if self.client is None:
            from botocore import handlers

            self.client = lambda_client(WAKE_TIMEOUT_SECONDS, retries=1,
                                        connect_timeout=WAKE_TIMEOUT_SECONDS)
            self.client.meta.events.unregister("before-call",
                                               handlers.add_recursion_detection_header)

    def __call__(self) -> None:
        self._invoke()

    def _invoke(self) -> None:
        try:
            self.client.invoke(FunctionName=self.function, InvocationType="Event",
                               Payload=WAKE_EVENT)
        except Exception:
            log.warning("waking the dispatcher (%s) failed; its schedule runs it within a "
                        "minute", self.function, exc_info=True)


def install_waker(settings: Settings) -> None:
    """Every function of the stack but the dispatcher (whose ``TIERQ_DISPATCHER_FUNCTION``
    is empty) wakes the dispatcher when a task of a queue with a consumer becomes ready."""
    from tierq.logic import wake

    if settings.dispatcher_function and wake.installed() is None:
        wake.install(LambdaWaker(settings.dispatcher_function))


def provide_functions(contexts: Iterable[Context], settings: Settings) -> None:
    """Give the engines' contexts that have no consumer functions yet the Lambda functions
    of the allow-list (one object shared by all), which the dispatcher calls."""
    missing = [ctx for ctx in contexts if ctx.consumers is None]
    if missing:
        functions = LambdaFunctions.from_settings(settings)
        for ctx in missing:
            ctx.consumers = functions
