"""Local control-plane processes and ports: a free port on 127.0.0.1, polling until a condition holds, and a
``spark-governor serve`` subprocess started, awaited (``/healthz``) and stopped.

Shared by the CLI (``spark-governor demo``), the benchmarks and the tests; it imports neither click nor Flask.
"""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time

import requests


class ProcessError(RuntimeError):
    """A control plane that exited or did not become healthy in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s: float, interval_s: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until it is truthy (returned) or ``timeout_s`` passes (AssertionError)."""
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def healthy(url: str) -> bool:
    """Whether the control plane at ``url`` answers ``GET /healthz`` with 200."""
    try:
        return requests.get(url + "/healthz", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def wait_healthy(url: str, timeout_s: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until the control plane at ``url`` is healthy; :class:`ProcessError` if ``proc`` exits first (with the
    tail of its stderr when piped) or ``timeout_s`` passes."""
    def up() -> bool:
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr is not None else ""
            raise ProcessError(f"control plane exited with code {proc.returncode}" + (f":\n{err}" if err else ""))
        return healthy(url)

    try:
        wait_for(up, timeout_s)
    except AssertionError:
        raise ProcessError(f"control plane at {url} not healthy after {timeout_s}s") from None


def new_secret() -> str:
    """A random token secret (192 bits, URL-safe: no ``,`` or ``=``, so it fits ``SPARK_GOVERNOR_TOKENS``)."""
    return secrets.token_urlsafe(24)


def start_serve(db_url: str, port: int, *, report_token: str, stderr=subprocess.DEVNULL,
                timeout_s: float = 60.0) -> subprocess.Popen:
    """Run ``spark-governor serve`` on 127.0.0.1:``port`` in its own process and wait until it is healthy (it is
    stopped again if it does not come up). Reports need ``report_token`` (a token ``reporter`` with the ``report``
    scope, e.g. :func:`new_secret`), as in production; it reaches ``serve`` through the environment, not the
    command line."""
    env = dict(os.environ, SPARK_GOVERNOR_TOKENS=f"reporter:report={report_token}")
    env.pop("SPARK_GOVERNOR_ANONYMOUS_REPORTS", None)
    proc = subprocess.Popen([sys.executable, "-m", "spark_governor", "serve", "--port", str(port), "--db", db_url],
                            stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", timeout_s, proc=proc)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def stop_process(proc: subprocess.Popen, timeout_s: float = 15.0) -> None:
    """Terminate ``proc``; kill it if it has not exited after ``timeout_s``."""
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def descendants(pid: int) -> list[int]:
    """Every live descendant of process ``pid`` (children first), from ``/proc``: e.g. the executors a standalone
    worker launched. Empty where ``/proc`` is not readable."""
    import os

    parents: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(name))
    out, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(parents.get(child, []))
    return out


def kill_all(pids: list[int]) -> None:
    """SIGKILL to each of ``pids`` still alive (the stragglers of a process tree that was asked to stop)."""
    import os
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
