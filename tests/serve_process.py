"""A ``spark-governor serve`` process for fault tests: started on a fixed port of 127.0.0.1, stopped gracefully
(SIGTERM: gunicorn lets requests in flight finish) or killed with SIGKILL (the master and its workers at once, as
a crashed machine or an OOM-killed container), and started again on the same port and database.

Tokens reach ``serve`` through ``SPARK_GOVERNOR_TOKENS`` (not the command line); each start gets its own
``PROMETHEUS_MULTIPROC_DIR`` under the test's directory, so a killed process leaves nothing behind elsewhere.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from spark_governor.api.processes import ProcessError, free_port, wait_for, wait_healthy


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _gone(pid: int) -> bool:
    """The process has exited (a zombie counts as gone: its sockets are closed)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as serve binds
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class ServeProcess:
    """``spark-governor serve --db DB_URL`` on 127.0.0.1:``port`` (a free one by default) with ``tokens``
    (``{name: "scopes=secret"}`` as in ``SPARK_GOVERNOR_TOKENS``, e.g. ``{"reporter": "report=s3cret-123"}``)
    and extra ``serve`` options (e.g. ``["--evaluation-seconds", "0.5"]``). Its output goes to
    ``<tmp_dir>/serve-<n>.log``, one file per start."""

    def __init__(self, db_url: str, tmp_dir: Path, tokens: dict[str, str], args: tuple[str, ...] = (),
                 port: int | None = None) -> None:
        self.db_url, self.tmp_dir, self.args = db_url, Path(tmp_dir), tuple(args)
        self.tokens = ",".join(f"{name}:{spec}" for name, spec in tokens.items())
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._log: Path | None = None

    def start(self, timeout_s: float = 60.0) -> "ServeProcess":
        """Start ``serve`` and wait until ``/healthz`` answers 200 (seconds: ``timeout_s``)."""
        assert self.proc is None, "already running"
        wait_for(lambda: _port_free(self.port), 15, 0.05, f"port {self.port} free")
        self.starts += 1
        metrics_dir = self.tmp_dir / f"metrics-{self.starts}"
        metrics_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, SPARK_GOVERNOR_TOKENS=self.tokens, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir))
        env.pop("SPARK_GOVERNOR_ANONYMOUS_REPORTS", None)
        self._log = self.tmp_dir / f"serve-{self.starts}.log"
        with open(self._log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "spark_governor", "serve", "--port", str(self.port),
                                          "--db", self.db_url, *self.args], stdout=log, stderr=log, env=env)
        try:
            wait_healthy(self.url, timeout_s, proc=self.proc)
        except ProcessError as exc:
            self.kill()
            raise ProcessError(f"{exc}\n{self.log_tail()}") from None
        return self

    def kill(self) -> None:
        """SIGKILL to the master and every worker at the same moment; returns when all are gone (``start``
        waits for the port to be free)."""
        if self.proc is None:
            return
        family = [self.proc.pid, *_children(self.proc.pid)]
        for pid in family:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(15)
        wait_for(lambda: all(_gone(p) for p in family), 15, 0.02, "serve's workers gone")
        self.proc = None

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (graceful stop); the exit code (0 expected)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"serve did not stop within {timeout_s} s after SIGTERM\n{self.log_tail()}")
        self.proc = None
        return code

    def stop(self, how: str) -> None:
        """``how``: ``graceful`` (SIGTERM, must exit 0) or ``kill`` (SIGKILL)."""
        if how == "kill":
            self.kill()
        elif how == "graceful":
            code = self.terminate()
            assert code == 0, f"serve exited with {code}\n{self.log_tail()}"
        else:
            raise ValueError(f"how: expected 'graceful' or 'kill' (got {how!r})")

    def restart(self, how: str) -> None:
        self.stop(how)
        self.start()

    def log_tail(self, chars: int = 3000) -> str:
        return self._log.read_text(errors="replace")[-chars:] if self._log and self._log.exists() else ""

    def close(self) -> None:
        """Kill whatever is still running (a test's teardown: fast, the database is the test's own)."""
        self.kill()
