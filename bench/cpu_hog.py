"""A loaded machine on demand for ``bench scaling-real --cpu-hog N`` (issue #44): ``N`` processes that spin on the
CPU for as long as the runs go, so that the standalone cluster's executors register and work slower, as they did on
the slower machine of runs 113–114 (registration 7.6–9.1 s against 4.9 s, batches a third slower). Each is a
plain Python busy loop in its own session, killed when the context ends (also on an error or Ctrl-C)."""
from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def cpu_hog(n: int) -> Iterator[list[int]]:
    """``n`` busy processes (0: none) for the context's duration; yields their pids."""
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(max(0, int(n))):
            procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
