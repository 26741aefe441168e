"""A loopback HTTP server's reply, as the fakes that stand in for a proxy or a daemon's metrics
endpoint send it."""
from __future__ import annotations


def reply(handler, body: bytes) -> None:
    """200 with `body` and its length, from a http.server request handler."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
