"""A loaded machine on demand for ``bench scaling-real --cpu-hog CORES`` (issue #44): busy processes that take
``CORES`` cores' worth of CPU (0.5: half of one core) for as long as the runs go, so that the standalone cluster's
executors register and work slower, as they did on the slower machine of runs 113–114 (registration 7.6–9.1 s
against 4.9 s, batches a third slower). ``ceil(CORES)`` processes, each a Python loop busy for its share of every
100 ms and asleep for the rest, in its own session, killed when the context ends (also on an error or Ctrl-C).

Measured 2026-12-07 14:37 UTC on the 2-core machine with 1 core taken (``--cpu-hog 1 --policies kingman,static``):
registration 23.9 s (p90 25.6), an added executor's first tasks ×4.8, 205 µs of service per row against 128–149
in the quiet runs of the same day — slower than runs 113–114; a fraction of a core is the knob for those."""
from __future__ import annotations

import math
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

PERIOD_S = 0.1
_LOOP = ("import time\nbusy, idle = {busy!r}, {idle!r}\nwhile True:\n    t = time.perf_counter()\n"
         "    while time.perf_counter() - t < busy:\n        pass\n    if idle > 0:\n        time.sleep(idle)\n")


@contextmanager
def cpu_hog(cores: float) -> Iterator[list[int]]:
    """Busy processes taking ``cores`` cores' worth of CPU (0: none) for the context's duration; yields their
    pids."""
    n = math.ceil(max(0.0, float(cores)) - 1e-9)
    share = float(cores) / n if n else 0.0
    busy = PERIOD_S * min(1.0, share)
    code = _LOOP.format(busy=busy, idle=PERIOD_S - busy)
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
