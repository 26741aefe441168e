"""A loopback HTTP server's reply, as the fakes that stand in for a proxy or a daemon's metrics
endpoint send it, and a server that gives one body to every GET."""
from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


def reply(handler, body: bytes) -> None:
    """200 with `body` and its length, from a http.server request handler."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextlib.contextmanager
def serving(body: bytes) -> Iterator[str]:
    """A server on 127.0.0.1 answering every GET with `body` (a module proxy's zip, say): yields its
    base URL, and is shut down on leaving."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (the stdlib's name)
            reply(self, body)

        def log_message(self, *a):
            pass
    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
