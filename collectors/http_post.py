"""One HTTP POST bounded by a total deadline (issue #16): connect, send and every read get only the time left.

``requests``' ``timeout`` bounds each socket operation, not the exchange: a server that accepts and answers one
byte every few seconds keeps a request (and the reporter's sending thread) alive indefinitely. :class:`DeadlinePoster`
speaks HTTP/1.1 through the standard library's ``http.client`` and, before every socket read, sets the socket's
timeout to the time left before the post's deadline (at most ``read_timeout_s``, the longest silence tolerated);
the send gets the time left as its total (``socket.sendall`` with a timeout is bounded in total). So ``post``
returns or raises :class:`PostError` within ``deadline_s`` seconds (plus one scheduling delay), for ``http://``
and ``https://`` alike. ``abort()``, called from another thread, shuts the socket down: a blocked read ends at once
(``Reporter.stop`` uses it to keep its bound).

One keep-alive connection is reused between posts; a connection the server closed meanwhile is noticed before it is
reused, and a reused connection that fails before any answer is retried once on a fresh one. Units: seconds.
"""
from __future__ import annotations

import http.client
import io
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

#: the largest answer body read (the control plane answers a report with its directives, a few KiB)
MAX_ANSWER_BYTES = 4 * 1024 * 1024


class PostError(Exception):
    """The post got no complete answer; ``reason`` says why (shown as the reporter's ``last_error``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Answer:
    """A complete HTTP answer: status, headers (names lower-case) and body."""

    status: int
    headers: dict
    body: bytes


class _DeadlineRaw(io.RawIOBase):
    """The response's raw stream: each read waits at most the time left (and at most ``read_timeout_s``)."""

    def __init__(self, raw, sock: socket.socket, poster: "DeadlinePoster") -> None:
        super().__init__()
        self._raw, self._sock, self._poster = raw, sock, poster

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        left = self._poster.time_left()
        if left <= 0:
            raise _Deadline()
        wait = min(left, self._poster.read_timeout_s)
        self._sock.settimeout(wait)
        try:
            return self._raw.readinto(b)
        except socket.timeout:
            if wait >= left:
                raise _Deadline() from None
            raise _Silent() from None

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


class _Deadline(Exception):
    pass


class _Silent(Exception):
    pass


class _DeadlineSocket:
    """What ``http.client.HTTPResponse`` sees as its socket: only ``makefile`` is used."""

    def __init__(self, sock: socket.socket, poster: "DeadlinePoster") -> None:
        self._sock, self._poster = sock, poster

    def makefile(self, mode: str = "rb", *args, **kwargs):
        return io.BufferedReader(_DeadlineRaw(self._sock.makefile("rb", buffering=0), self._sock, self._poster))


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle keep-alive connection was closed by the server (readable while idle: EOF or junk)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class DeadlinePoster:
    """POSTs to one URL's host with a total deadline per post. Not thread-safe, except :meth:`abort`.

    ``connect_timeout_s`` bounds the TCP (and TLS) connection set-up, ``read_timeout_s`` the silence between two
    bytes of the answer, ``deadline_s`` the whole post; all in seconds. ``ssl_context``: for ``https://`` (default:
    the system's trust store with certificate verification)."""

    def __init__(self, url: str, *, deadline_s: float = 10.0, connect_timeout_s: float = 1.0,
                 read_timeout_s: float = 5.0, ssl_context: Optional[ssl.SSLContext] = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint: expected an http:// or https:// URL (got {url!r})")
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.deadline_s, self.connect_timeout_s, self.read_timeout_s = deadline_s, connect_timeout_s, read_timeout_s
        self.ssl_context = ssl_context
        self._conn: Optional[http.client.HTTPConnection] = None
        self._deadline = 0.0
        self._lock = threading.Lock()
        self._aborted = False

    def time_left(self) -> float:
        return self._deadline - time.monotonic()

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """The connection to use and whether it is a reused one."""
        conn = self._conn
        if conn is not None and conn.sock is not None and not _dropped(conn.sock):
            return conn, True
        self.close()
        if self.scheme == "https":
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.ssl_context)
        else:
            conn = http.client.HTTPConnection(self.host, self.port)
        poster = self

        def response_class(sock, *args, **kwargs):
            return http.client.HTTPResponse(_DeadlineSocket(sock, poster), *args, **kwargs)

        conn.response_class = response_class
        self._conn = conn
        return conn, False

    def post(self, body: bytes, headers: dict, deadline_s: Optional[float] = None) -> Answer:
        """POST ``body`` with ``headers``; the answer within ``deadline_s`` (default: the poster's), else
        :class:`PostError`. Any status is an :class:`Answer` (the caller decides what 4xx/5xx mean)."""
        limit = self.deadline_s if deadline_s is None else deadline_s
        self._deadline = time.monotonic() + max(0.0, limit)
        self._aborted = False
        for attempt in (0, 1):
            conn, reused = self._connection()
            try:
                return self._exchange(conn, body, headers)
            except _Deadline:
                self.close()
                raise PostError(f"post: no complete answer within the {limit:g} s deadline") from None
            except _Silent:
                self.close()
                raise PostError(f"post: no data from the server for {self.read_timeout_s:g} s") from None
            except socket.timeout:
                self.close()
                what = "connect" if conn.sock is None else "post"
                raise PostError(f"{what}: no progress within the {limit:g} s deadline") from None
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self.close()
                if reused and attempt == 0 and not self._aborted and self.time_left() > 0:
                    continue  # the server closed the idle connection as we reused it: once more, afresh
                raise PostError(self._reason(exc)) from None
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self.close()
                raise PostError(self._reason(exc)) from None
        raise AssertionError("unreachable")

    def _reason(self, exc: BaseException) -> str:
        if self._aborted:
            return "post: aborted (the reporter is stopping)"
        return f"post: {exc.__class__.__name__}: {exc}"[:300]

    def _exchange(self, conn: http.client.HTTPConnection, body: bytes, headers: dict) -> Answer:
        if conn.sock is None:
            left = self.time_left()
            if left <= 0:
                raise _Deadline()
            conn.timeout = min(self.connect_timeout_s, left)
            conn.connect()
        left = self.time_left()
        if left <= 0:
            raise _Deadline()
        conn.sock.settimeout(left)  # the whole send: sendall's timeout is a total since Python 3.5
        conn.request("POST", self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read(MAX_ANSWER_BYTES + 1)
        if len(data) > MAX_ANSWER_BYTES:
            self.close()
            raise PostError(f"post: answer larger than {MAX_ANSWER_BYTES} bytes")
        answer = Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        if resp.will_close or not resp.isclosed():  # not reusable (or not read to its end)
            self.close()
        return answer

    def abort(self) -> None:
        """End the post in progress now (from any thread): its blocked read or send fails at once."""
        self._aborted = True
        self._deadline = 0.0
        with self._lock:
            conn = self._conn
            sock = conn.sock if conn is not None else None
        if sock is not None:
            try:  # the plain socket's shutdown (an SSLSocket's would start a TLS close from this thread)
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
