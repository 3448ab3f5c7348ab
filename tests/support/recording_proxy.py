"""A plain-http reverse proxy in front of MinIO that records every request's headers and
the sha256 of its body: a test sees exactly what a man in the middle would see."""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import http.server
import threading
import urllib.parse

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
}


@dataclasses.dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body_sha256: str
    body_length: int


class RecordingProxy:
    """Listens on `host` (where pods reach it, on real nodes) at a port of its own."""

    def __init__(self, upstream: str, host: str = "127.0.0.1"):
        target = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = target.hostname, target.port or 80
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer((host, 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._server.shutdown()
        self._server.server_close()

    def uploads(self) -> list[Recorded]:
        """Requests that carried a body to the store (objects, parts)."""
        with self._lock:
            return [r for r in self.requests if r.method in ("PUT", "POST") and r.body_length > 0]

    def _handler(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_):
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _forward(self):
                body = self._body()
                headers = {k.lower(): v for k, v in self.headers.items()}
                with proxy._lock:
                    proxy.requests.append(
                        Recorded(self.command, self.path, headers, hashlib.sha256(body).hexdigest(), len(body))
                    )
                upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
                try:
                    upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():  # Host too: it is signed
                        if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                            upstream.putheader(name, value)
                    upstream.putheader("Content-Length", str(len(body)))
                    upstream.endheaders(body)
                    response = upstream.getresponse()
                    payload = response.read()
                    self.send_response(response.status, response.reason)
                    for name, value in response.getheaders():
                        if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Handler
