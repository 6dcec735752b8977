"""Two hostile "control planes" on 127.0.0.1 for the reporter (issue #16, Faults): real TCP servers, one thread
per connection, stoppable.

* :class:`BlackHoleServer` accepts every connection, reads whatever is sent and never answers.
* :class:`DripServer` reads each HTTP request (head and ``Content-Length`` body), then answers one byte every
  ``drip_s`` seconds, forever: a status line and then an endless header, so the answer never completes and no
  per-read timeout longer than ``drip_s`` ever fires (only a total deadline per post ends it; see
  ``collectors.http_post``).

Both count ``connections`` and ``requests`` (request heads seen; the black hole counts a connection's first
head) and ``bytes_received``. ``stop()`` closes the listening socket and every connection and joins the threads
within about a second. Units: seconds.
"""
from __future__ import annotations

import socket
import threading
from typing import Optional

_POLL_S = 0.2  # how often blocked accepts/reads look at the stop flag, seconds


class _TcpServer:
    """A listening socket on 127.0.0.1 (free port) handing each connection to ``_serve`` in its own thread."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(_POLL_S)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self.requests = 0
        self.bytes_received = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name=f"{type(self).__name__}-{self.port}", daemon=True)
        self._acceptor.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.settimeout(_POLL_S)
            t = threading.Thread(target=self._guarded, args=(conn,), name=f"{type(self).__name__}-{self.port}-conn",
                                 daemon=True)
            with self._lock:
                self.connections += 1
                self._conns.append(conn)
                self._threads.append(t)
            t.start()

    def _guarded(self, conn: socket.socket) -> None:
        try:
            self._serve(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def _recv(self, conn: socket.socket) -> Optional[bytes]:
        """The next bytes from ``conn``; b"" at end of stream, None when stopping."""
        while not self._stop.is_set():
            try:
                data = conn.recv(65536)
            except socket.timeout:
                continue
            with self._lock:
                self.bytes_received += len(data)
            return data
        return None

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Close everything; returns once the threads are gone (each polls the stop flag every 0.2 s)."""
        self._stop.set()
        self._sock.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._acceptor.join(2.0)
        for t in threads:
            t.join(2.0)

    def stats(self) -> dict:
        return {"connections": self.connections, "requests": self.requests, "bytes_received": self.bytes_received}


class BlackHoleServer(_TcpServer):
    """Accepts, reads and discards everything, never answers (a hung control plane)."""

    def _serve(self, conn: socket.socket) -> None:
        seen_head = False
        buf = b""
        while (data := self._recv(conn)):
            if not seen_head:
                buf += data
                if b"\r\n\r\n" in buf:
                    seen_head = True
                    with self._lock:
                        self.requests += 1


class DripServer(_TcpServer):
    """Reads a request, then answers one byte every ``drip_s`` seconds without ever finishing the answer."""

    ANSWER_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Drip: "

    def __init__(self, drip_s: float = 1.0) -> None:
        if not drip_s > 0:
            raise ValueError(f"drip_s: expected seconds > 0 (got {drip_s})")
        self.drip_s = drip_s
        self.bytes_sent = 0
        super().__init__()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:  # the request head
            data = self._recv(conn)
            if not data:
                return
            buf += data
        head, _, body = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip() or 0)
        while len(body) < length:
            data = self._recv(conn)
            if not data:
                return
            body += data
        with self._lock:
            self.requests += 1
        i = 0
        while not self._stop.wait(self.drip_s):  # the first byte after drip_s, then one every drip_s
            byte = self.ANSWER_HEAD[i:i + 1] or b"a"  # the endless header value
            conn.sendall(byte)
            i += 1
            with self._lock:
                self.bytes_sent += 1

    def stats(self) -> dict:
        return {**super().stats(), "bytes_sent": self.bytes_sent, "drip_s": self.drip_s}
