"""The local gateway's reading of chunked request bodies (tierq.local.gateway.http): a chunk size
that is not a non-negative hex number is a malformed body (400), never a way past the
request limit (413) or a read without end."""

from __future__ import annotations

import socket
from typing import Any

from tests.handlers.support import stand_in_gateway
from tierq.local.gateway.http import LocalHttpServer


def recording_server() -> tuple[LocalHttpServer, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        events.append(event)
        return {"statusCode": 200, "body": "{}"}

    server = LocalHttpServer("127.0.0.1", 0, stand_in_gateway(handler), access_log=False)
    server.start()
    return server, events


def exchange(server: LocalHttpServer, raw: bytes) -> bytes:
    """Send ``raw``, close the sending side, and read the whole answer."""
    host, port = server.server_address[:2]
    with socket.create_connection((str(host), int(port)), timeout=30) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


HEAD = (b"POST /v1/queues/q/tasks HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")


def test_a_negative_chunk_size_is_a_malformed_body_and_invokes_nothing() -> None:
    server, events = recording_server()
    try:
        # "-1" would read to the end of the stream, however long (past MAX_BODY_BYTES too)
        answer = exchange(server, HEAD + b'-1\r\n{"payload": 1}')
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b"malformed_request" in answer
        assert events == []
    finally:
        server.shutdown()
        server.server_close()


def test_well_formed_chunks_still_arrive_whole() -> None:
    server, events = recording_server()
    try:
        body = b'{"payload": 1}'
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        answer = exchange(server, HEAD + chunked)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert events[-1]["body"] == body.decode()
    finally:
        server.shutdown()
        server.server_close()
