"""Leader election: the scheduler (policy evaluation, retention) runs in exactly one process.

Across ``serve`` workers and replicas that share a database, one process leads:

* **PostgreSQL**: the leader holds the session-level advisory lock ``LOCK_KEY`` on a dedicated
  connection (``pg_try_advisory_lock``). When the leader dies, PostgreSQL drops its session and
  with it the lock; the others try every ``poll_s`` seconds, so one takes over within ``poll_s``
  (``serve`` uses half an evaluation interval, at most 5 s). Before each scheduled run the leader
  checks that its connection (and so the lock) is alive.
* **SQLite**: an exclusive ``flock`` on ``<database file>.leader``; the operating system releases
  it when the process dies. (SQLite is one host, so this is exactly once.)
* any other database, or an in-memory SQLite: this process leads.

Replicas (issue #42): several ``serve`` processes on different hosts share one PostgreSQL. Each is one *replica*
(:func:`replica_id`: ``SPARK_GOVERNOR_REPLICA``, else host name and the ``serve`` master's pid, shared by its
workers). The leader says whose it is — PostgreSQL: the ``application_name`` of the session holding the lock,
``spark-governor/<replica>``; SQLite: the replica written into the lock file — so any process can tell which
replica leads (:func:`leader_replica`): ``/metrics`` exports the jobs' series from the leading replica only, so
that Prometheus scraping every replica sees each job once (``api.metrics``).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Optional

from sqlalchemy.engine import Engine

log = logging.getLogger("spark_governor.leader")

#: the advisory lock key (any constant 64-bit integer; "sg-sched")
LOCK_KEY = 0x73672D7363686564
#: the environment variable naming this process's replica (``serve`` sets it for its workers)
REPLICA_ENV = "SPARK_GOVERNOR_REPLICA"
_APP_PREFIX = "spark-governor/"
#: PostgreSQL: the holder of LOCK_KEY (a bigint key is (classid, objid) = (high, low 32 bits), objsubid 1)
_HOLDER = ("SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
           "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :hi AND l.objid = :lo AND l.objsubid = 1")


def replica_id() -> str:
    """This process's replica: ``$SPARK_GOVERNOR_REPLICA``, else ``<host name>:<pid>`` (``serve`` sets the variable
    to its master's before its workers start, so they share it). At most 48 characters."""
    return (os.environ.get(REPLICA_ENV) or f"{socket.gethostname()}:{os.getpid()}")[:48]


def leader_replica(engine) -> Optional[str]:
    """The replica whose process holds the leadership now, or None (none, or it cannot be told)."""
    if engine.dialect.name == "postgresql":
        from sqlalchemy import text

        with engine.connect() as conn:
            name = conn.execute(text(_HOLDER), {"hi": LOCK_KEY >> 32, "lo": LOCK_KEY & 0xFFFFFFFF}).scalar()
        return name[len(_APP_PREFIX):] if name and name.startswith(_APP_PREFIX) else None
    if engine.dialect.name == "sqlite":
        db = engine.url.database
        if not db or db == ":memory:":
            return replica_id()
        import fcntl

        path = db + ".leader"
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            try:  # a shared lock is refused while a leader holds its exclusive one
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return os.pread(fd, 256, 0).decode("utf-8", "replace").strip() or None
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)
    return replica_id()


class Leader:
    """Compete for leadership in a background thread; ``is_leader()`` answers for this process."""

    def __init__(self, engine: Engine, poll_s: float = 5.0, name: str = "", replica: Optional[str] = None) -> None:
        self.engine, self.poll_s, self.name = engine, max(0.05, poll_s), name or str(os.getpid())
        self.replica = replica or replica_id()
        self._lock = threading.Lock()
        self._leading = False
        self._conn = None  # PostgreSQL: the connection holding the advisory lock
        self._fd: Optional[int] = None  # SQLite: the locked file
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.dialect = engine.dialect.name
        self.terms = 0  # how many times this process became leader

    # -- one attempt ------------------------------------------------------------------------
    def _sqlite_path(self) -> Optional[str]:
        db = self.engine.url.database
        return None if not db or db == ":memory:" else db + ".leader"

    def _try_acquire(self) -> bool:
        if self.dialect == "postgresql":
            from sqlalchemy import text

            try:
                conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            except Exception as exc:
                log.debug("leader: cannot connect: %s", exc.__class__.__name__)
                return False
            try:
                conn.execute(text("SELECT set_config('application_name', :name, false)"),
                             {"name": (_APP_PREFIX + self.replica)[:63]})
                got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": LOCK_KEY}).scalar())
            except Exception:
                conn.invalidate()
                conn.close()
                return False
            if got:
                self._conn = conn
            else:
                conn.close()
            return got
        if self.dialect == "sqlite":
            path = self._sqlite_path()
            if path is None:
                return True
            import fcntl

            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            os.ftruncate(fd, 0)
            os.pwrite(fd, self.replica.encode(), 0)  # whose leadership it is (leader_replica)
            self._fd = fd
            return True
        return True

    def _alive(self) -> bool:
        """Whether the held lock is still held (PostgreSQL: its session answers)."""
        if self._conn is None:
            return True
        from sqlalchemy import text

        try:
            self._conn.execute(text("SELECT 1"))
            return True
        except Exception:
            return False

    def _release(self) -> None:
        if self._conn is not None:
            try:
                from sqlalchemy import text

                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_KEY})
            except Exception:
                self._conn.invalidate()
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def tick(self) -> bool:
        """One election round: keep or drop the lock, or try to take it. Returns is_leader()."""
        with self._lock:
            if self._leading and not self._alive():
                log.warning("leader %s: lost the lock (database session gone)", self.name)
                self._leading = False
                self._release()
            if not self._leading and not self._stop.is_set() and self._try_acquire():
                self._leading = True
                self.terms += 1
                log.info("leader %s: now runs the scheduler", self.name)
            return self._leading

    # -- lifecycle ---------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return self._leading

    def check(self) -> bool:
        """Before a scheduled run: still the leader (the lock is verified)?"""
        return self.tick()

    def start(self) -> "Leader":
        self.tick()
        self._thread = threading.Thread(target=self._run, name="spark-governor-leader", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.tick()
            except Exception as exc:  # never let the election thread die
                log.warning("leader %s: election failed: %s", self.name, exc.__class__.__name__)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.poll_s + 5)
        with self._lock:
            self._leading = False
            self._release()
