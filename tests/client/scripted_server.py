"""A real HTTP server on 127.0.0.1 that answers from a script, for the client's retry, error
and signing behaviour (the parts no healthy API would show on demand); and ``DroppingProxy``,
a proxy in front of the real API that loses the first POST's answer."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (a slow server)
    raw: bytes | None = None  # a body that is not JSON


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class ScriptedServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server._lock:
                    server.received.append(Received(
                        self.command, self.path,
                        {k.lower(): v for k, v in self.headers.items()}, body))
                    reply = server.replies.popleft() if server.replies else Reply(
                        500, {"error": {"code": "unscripted", "message": "no reply scripted",
                                        "details": []}})
                if reply.delay:
                    time.sleep(reply.delay)
                data = reply.raw if reply.raw is not None else (
                    b"" if reply.body is None else json.dumps(reply.body).encode())
                try:
                    self.send_response(reply.status)
                    content_type = "text/html" if reply.raw is not None else "application/json"
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a timeout test)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Forwarded:
    """A request the proxy passed on: when (monotonic), method, path and body."""

    at: float
    method: str
    path: str
    body: bytes = b""


class DroppingProxy:
    """Forwards requests to the API; the first POST's answer is lost on the way back (the
    connection closes without a response), as when a gateway times out after the work was
    done. ``drop=False``: loses nothing, only records (``requests``)."""

    def __init__(self, target: str, *, drop: bool = True) -> None:
        self.dropped = 0 if drop else 1
        self.forwarded: list[dict[str, str]] = []
        self.requests: list[Forwarded] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection")}
                proxy.forwarded.append({k.lower(): v for k, v in headers.items()})
                proxy.requests.append(Forwarded(time.monotonic(), self.command, self.path,
                                                body))
                reply = httpx.request(self.command, target + self.path, content=body,
                                      headers=headers, timeout=30)
                if self.command == "POST" and proxy.dropped == 0:
                    proxy.dropped += 1
                    self.close_connection = True
                    return  # the work is done; the answer never arrives
                self.send_response(reply.status_code)
                for name in ("content-type", "idempotent-replayed", "retry-after"):
                    if name in reply.headers:
                        self.send_header(name, reply.headers[name])
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
