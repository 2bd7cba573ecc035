"""The local HTTP API: routes each request to the function template.yaml gives its route,
with the payload v2 event API Gateway would build, and answers with what API Gateway would
make of the result. Requests that reach no function, or whose function fails:

| the request                                        | the answer                           |
| -------------------------------------------------- | ------------------------------------ |
| unknown path                                       | 404                                  |
| known path, other method (any method name, TRACE   | 405 with ``Allow``, in the API's     |
| included)                                          | error shape                          |
| body over Lambda's request limit                   | 413 in the API's error shape         |
| a function that raises, or returns more than       | 500 ``{"message": "Internal Server   |
| Lambda's response limit as its runtime encodes it  | Error"}``                            |
| (:mod:`tierq.core.sizing`)                         |                                      |

Local only: a request header ``x-tierq-jwt-claims: {"tenant": "acme"}`` becomes the JWT
claims of ``requestContext.authorizer.jwt`` (as API Gateway's JWT authoriser would put them),
so tenant pinning and the admin scope can be tried without an identity provider. The
functions then treat the request exactly as on AWS: a ``sub`` or ``client_id`` in it makes the
caller one of several of its tenant, with ``Idempotency-Key``s of its own. The header is not
passed on.

Without the header: while the server listens on a loopback address, the request reaches
the function marked as coming from this gateway (:data:`tierq.aws.http.access.LOCAL_GATEWAY`, an
in-process object no request can carry), which gives it an admin's reach. Listening on any
other address (``tierq dev --host 0.0.0.0``), anyone who reaches the port could send the
header, so every route but the public ones also requires ``Authorization: Bearer <token>``
with the server's access token. That is ``TIERQ_DEV_TOKEN``, or one made at random and
printed by ``tierq dev``. Without it the gateway answers 401 ``unauthorized`` and invokes
nothing.
With the token and no claims header a request is the local caller, as over loopback (so
the dashboard works with the token as its bearer token). On loopback, a request to a
non-public route is 403 ``forbidden`` when its ``Host`` is not a loopback name (127.0.0.1,
localhost, [::1], any port) or its ``Origin`` is not a loopback origin. A web page in the
developer's browser must not act as the local admin, by a cross-site POST or by DNS
rebinding.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tierq.aws.http.access import LOCAL_GATEWAY, LOCAL_GATEWAY_KEY
from tierq.core import sizing
from tierq.dal.payload_store import LOCAL_ROUTE as LOCAL_PAYLOAD_ROUTE
from tierq.local.gateway.events import HttpResponse, build_event, to_http_response
from tierq.local.gateway.lambdas import LocalFunction
from tierq.local.gateway.template import HttpRoute

# Lambda's request limit (the function would never be invoked with more), not API Gateway's
# 10 MB: bodies between the two are refused here as the function refuses them, 413.
MAX_BODY_BYTES = sizing.REQUEST_BODY_LIMIT
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024  # larger bodies are refused by closing the connection
INTEGRATION_TIMEOUT_SECONDS = 30.0  # HTTP API's maximum integration timeout
CLAIMS_HEADER = "x-tierq-jwt-claims"


def _json_response(status: int, body: Mapping[str, Any],
                   extra: list[tuple[str, str]] | None = None) -> HttpResponse:
    return HttpResponse(status, [("Content-Type", "application/json"), *(extra or [])],
                        json.dumps(body).encode())


def _error(status: int, code: str, message: str,
           extra: list[tuple[str, str]] | None = None) -> HttpResponse:
    return _json_response(status, {"message": message,
                                   "error": {"code": code, "message": message, "details": []}},
                          extra)


@dataclass
class Match:
    route: HttpRoute
    path_parameters: dict[str, str]


class Router:
    """Which route (and so which function) a method and raw path go to."""

    def __init__(self, routes: list[HttpRoute]) -> None:
        # literal paths first, then fewer parameters first (API Gateway prefers the most
        # specific route)
        self.routes = sorted(routes, key=lambda r: (r.path.count("{"), -len(r.path)))

    def match(self, method: str, raw_path: str) -> Match | list[str]:
        """The matching route, or the methods the path allows (empty: unknown path)."""
        allowed: list[str] = []
        for route in self.routes:
            params = route.match(raw_path)
            if params is None:
                continue
            if route.method in (method, "ANY"):
                return Match(route, params)
            allowed.append(route.method)
        return sorted(set(allowed))


# The runtime escapes a body character into at most 6 bytes (\uXXXX): a body this short,
# with its envelope, cannot reach the limit, so its exact size is not worth computing.
_SURELY_FITS_BODY_CHARS = (sizing.LAMBDA_PAYLOAD_LIMIT - 64 * 1024) // 6


def response_size(result: Any) -> int | None:
    """A function's result as the Lambda runtime writes it (bytes), or None when it is
    clearly far within Lambda's response limit."""
    body = result.get("body") if isinstance(result, dict) else None
    if isinstance(body, str) and len(body) <= _SURELY_FITS_BODY_CHARS:
        return None
    return sizing.runtime_encoded_size(result)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address a server is bound to) is a loopback address."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return False


_LOCAL_HOST_NAMES = frozenset({"localhost"})


def _host_part(authority: str) -> str | None:
    """The host of ``host[:port]`` (``[v6]:port`` for IPv6), None when malformed."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0 or (authority[end + 1:] and not authority[end + 1:].startswith(":")):
            return None
        host, port = authority[1:end], authority[end + 2:]
    else:
        host, _, port = authority.partition(":")
    if port and not port.isdigit():
        return None
    return host


def is_loopback_authority(authority: str) -> bool:
    """Whether a ``Host`` header (or an origin's host and port) names this machine by a
    loopback name or address: 127.0.0.1, localhost, [::1], with any port. A DNS name that
    merely resolves to a loopback address does not count (that is DNS rebinding)."""
    host = _host_part(authority.strip())
    if not host:
        return False
    return host.lower() in _LOCAL_HOST_NAMES or is_loopback(host)


def is_loopback_origin(origin: str) -> bool:
    """Whether an ``Origin`` header is a page served from this machine's loopback
    (``http://localhost:3000``); ``null`` (sandboxed frames, files) is not."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or parts.path or parts.query:
        return False
    return is_loopback_authority(parts.netloc)


def browser_refusal(headers: list[tuple[str, str]]) -> str | None:
    """Why a request to the loopback gateway cannot be let in as its local caller, or None.
    A web page the developer visits can make the browser send requests here (a typeless
    POST needs no preflight), and DNS rebinding can make them same-origin: such requests
    carry the page's Origin, or a Host that is not a loopback name. Clients that are not
    browsers send a loopback Host (or none) and no foreign Origin."""
    for name, value in headers:
        lowered = name.lower()
        if lowered == "host" and not is_loopback_authority(value):
            return (f"the Host header {value!r} is not a loopback name (127.0.0.1, localhost "
                    f"or [::1]): this local API answers only requests addressed to loopback")
        if lowered == "origin" and not is_loopback_origin(value):
            return (f"requests from the web origin {value!r} are refused: a web page may not "
                    f"act as the local admin of tierq dev")
    return None


class LocalApi:
    """Turns HTTP requests into invocations of the local functions.

    ``open_without_claims``: whether a request without the claims header may go on (as the
    local, admin-like caller). False until the server knows it is bound to a loopback
    address (:class:`LocalHttpServer` sets it). ``access_token``: when set, a request to a
    non-public route without it as its bearer token is 401 (what a server bound to another
    address requires: :class:`LocalHttpServer` makes one when none was given)."""

    def __init__(self, routes: list[HttpRoute], functions: Mapping[str, LocalFunction],
                 log: Callable[[str], None] | None = None, *,
                 open_without_claims: bool = False, access_token: str | None = None) -> None:
        self.router = Router(routes)
        self.functions = functions
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.open_without_claims = open_without_claims
        self.access_token = access_token

    def _token_refusal(self, headers: list[tuple[str, str]]) -> str | None:
        """Why the request's bearer token is not the access token, or None."""
        assert self.access_token is not None
        given = next((v for n, v in headers if n.lower() == "authorization"), "")
        scheme, _, token = given.strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
                token.strip().encode(), self.access_token.encode()):
            return None
        return ("this local API does not listen on a loopback address: send "
                "'Authorization: Bearer <token>' with the token tierq dev printed at its start "
                "(or TIERQ_DEV_TOKEN), and the " + CLAIMS_HEADER + " header")

    def handle(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes,
               source_ip: str) -> tuple[HttpResponse, str]:
        """(response, name of the function that served it or a reason)."""
        parts = urlsplit(target)
        raw_path = parts.path or "/"
        found = self.router.match(method, raw_path)
        if isinstance(found, list):
            if found:
                return _error(405, "method_not_allowed",
                              f"{method} is not allowed on {raw_path}; allowed: "
                              f"{', '.join(found)}", [("Allow", ", ".join(found))]), "-"
            return _error(404, "not_found", f"no route for {method} {raw_path}"), "-"
        if self.open_without_claims and not found.route.public:
            # on loopback the claims header is self-asserted as well: check both paths
            refusal = browser_refusal(headers)
            if refusal is not None:
                return _error(403, "forbidden", refusal), "-"
        token_checked = self.access_token is not None and not found.route.public
        if token_checked:
            refusal = self._token_refusal(headers)
            if refusal is not None:
                return _error(401, "unauthorized", refusal), "-"
        claims: dict[str, Any] | None = None
        passed: list[tuple[str, str]] = []
        for name, value in headers:
            if token_checked and name.lower() == "authorization":
                continue  # the gateway's own credential: no function sees it
            if name.lower() != CLAIMS_HEADER:
                passed.append((name, value))
                continue
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                return _error(400, "malformed_request",
                              f"{CLAIMS_HEADER} must be a JSON object of claims"), "-"
            claims = parsed
        # a request with the access token is the local caller, as one over loopback is
        if claims is None and not found.route.public and not (
                self.open_without_claims or token_checked):
            return _error(401, "unauthorized",
                          f"this local API does not listen on a loopback address: send the "
                          f"{CLAIMS_HEADER} header (a JSON object of JWT claims with a tenant "
                          f"claim or the admin scope)"), "-"
        function = self.functions[found.route.function]
        event = build_event(
            method=method, raw_path=raw_path, raw_query=parts.query, headers=passed, body=body,
            route_key=found.route.route_key, path_parameters=found.path_parameters,
            source_ip=source_ip, claims=None if found.route.public else claims,
        )
        if claims is None and not found.route.public:
            event[LOCAL_GATEWAY_KEY] = LOCAL_GATEWAY
        started = time.monotonic()
        try:
            result = function.invoke(event)
        except Exception as exc:
            self.log(f"[tierq dev] {function.spec.logical_id} failed: {exc!r}")
            if function.error:
                self.log(function.error)
            else:
                import traceback

                self.log(traceback.format_exc())
            return _json_response(500, {"message": "Internal Server Error"}), function.spec.name
        if time.monotonic() - started > min(INTEGRATION_TIMEOUT_SECONDS, function.spec.timeout):
            return _json_response(503, {"message": "Service Unavailable"}), function.spec.name
        try:
            size = response_size(result)
            if size is not None and size > sizing.LAMBDA_PAYLOAD_LIMIT:
                # Lambda refuses the response (Function.ResponseSizeTooLarge) and the HTTP
                # API answers 500: the oversized body never reaches the client on AWS
                self.log(f"[tierq dev] {function.spec.logical_id} returned a response of "
                         f"{size:,} bytes as the Lambda runtime encodes it, more than the "
                         f"{sizing.LAMBDA_PAYLOAD_LIMIT:,} a response may carry")
                return (_json_response(500, {"message": "Internal Server Error"}),
                        function.spec.name)
            return to_http_response(result), function.spec.name
        except (TypeError, ValueError) as exc:
            self.log(f"[tierq dev] {function.spec.logical_id} returned a malformed response: "
                     f"{exc!r}")
            return _json_response(500, {"message": "Internal Server Error"}), function.spec.name


class _RequestHandler(BaseHTTPRequestHandler):
    server: LocalHttpServer
    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm holds
    # the body until the client's delayed ACK (~40 ms per keep-alive request)
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request is written by _serve

    def _read_body(self) -> bytes | None:
        """The body, or None when it is over the limit (the connection is then closed)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = bytearray()
            while True:
                size_line = self.rfile.readline(65537).split(b";")[0].strip()
                size = int(size_line or b"0", 16)
                if size < 0:  # read(-n) would read to the end of the stream, unbounded
                    raise ValueError(f"negative chunk size {size_line!r}")
                if size == 0:
                    while self.rfile.readline(65537).strip():
                        pass  # trailers
                    return bytes(chunks)
                if len(chunks) + size > MAX_BODY_BYTES:
                    self.close_connection = True
                    return None
                chunks += self.rfile.read(size)
                self.rfile.readline(3)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            if length <= DRAIN_LIMIT_BYTES:  # read it away, so the client sees the 413
                left = length
                while left > 0:
                    chunk = self.rfile.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    left -= len(chunk)
            else:
                self.close_connection = True
            return None
        return self.rfile.read(length) if length > 0 else b""

    def _serve_payload(self) -> None:
        """A presigned-like request to the local payload store (``/_payloads/<key>``): its
        signature is its credential, as for a presigned S3 URL (no token, no claims)."""
        # (imported here: the gateway's other requests never need them)
        from tierq.config import get_settings
        from tierq.dal.payload_store import LocalPayloadStore, payload_store

        started = time.monotonic()
        store = payload_store()
        parts = urlsplit(self.path)
        size = int(self.headers.get("Content-Length") or 0)
        status, body = 200, b""
        if not isinstance(store, LocalPayloadStore):
            status, body = 404, b"no local payload store (TIERQ_PAYLOAD_DIR)"
        elif self.command not in ("GET", "PUT"):
            status, body = 405, b"GET or PUT"
        elif self.command == "PUT" and size > get_settings().max_offloaded_payload_bytes:
            status, body = 413, b"over TIERQ_MAX_OFFLOADED_PAYLOAD_BYTES"
            self.close_connection = True
        else:
            key, refusal = store.check(self.command, parts.path, parts.query,
                                       size if self.command == "PUT" else None)
            if refusal is not None:
                status, body = 403, refusal.encode()
            elif self.command == "PUT":
                store.write(key, self.rfile.read(size))
            else:
                try:
                    body = store.read(key)
                except KeyError:
                    status, body = 404, f"no object {key}".encode()
        if self.command == "PUT" and status != 200 and not self.close_connection:
            self.rfile.read(size)  # (read away: the connection stays usable)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if status == 200
                         else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        if self.server.access_log:
            elapsed = (time.monotonic() - started) * 1000
            print(f"[tierq dev] {self.command} {parts.path} -> {status} (payloads, "
                  f"{elapsed:.0f} ms)", file=sys.stderr, flush=True)

    def _serve(self) -> None:
        if self.path.startswith(LOCAL_PAYLOAD_ROUTE):
            self._serve_payload()
            return
        started = time.monotonic()
        served_by = "-"
        try:
            body = self._read_body()
        except ValueError:
            response = _error(400, "malformed_request", "malformed chunked body")
            body = b""
            self.close_connection = True
        else:
            if body is None:
                response = _error(413, "payload_too_large",
                                  f"the request body is over {MAX_BODY_BYTES:,} bytes, more "
                                  "than a Lambda request may carry")
            else:
                headers = [(k, v) for k, v in self.headers.items()]
                response, served_by = self.server.api.handle(
                    self.command, self.path, headers, body, self.client_address[0])
        payload = b"" if self.command == "HEAD" else response.body
        self.send_response(response.status)
        names = {name.lower() for name, _ in response.headers}
        for name, value in response.headers:
            if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(name, value)
        if "content-type" not in names and response.body:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(response.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if payload:
            self.wfile.write(payload)
        if self.server.access_log:
            elapsed = (time.monotonic() - started) * 1000
            print(f"[tierq dev] {self.command} {self.path} -> {response.status} "
                  f"({served_by}, {elapsed:.0f} ms)", file=sys.stderr, flush=True)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve

    def __getattr__(self, name: str) -> Any:
        # any other method (TRACE, CONNECT, PROPFIND, …) is routed like the rest: 405 with
        # ``Allow`` on a known path, 404 elsewhere, never http.server's 501 HTML page
        if name.startswith("do_") and name[3:].isalpha():
            return self._serve
        raise AttributeError(name)


class LocalHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, host: str, port: int, api: LocalApi, *, access_log: bool = True) -> None:
        self.api = api
        self.access_log = access_log
        super().__init__((host, port), _RequestHandler)
        # decided on the address actually bound, not on the name asked for
        api.open_without_claims = self.loopback
        if not self.loopback and api.access_token is None:
            # others on the network reach it: the claims header alone proves nothing
            api.access_token = secrets.token_urlsafe(24)

    @property
    def loopback(self) -> bool:
        return is_loopback(str(self.server_address[0]))

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]  # as server_address, but typed str
        return f"http://{host}:{port}"

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                  name="tierq-dev-http", daemon=True)
        thread.start()
        return thread
