"""``bench scaling-real --cpu-hog N`` (issue #44): busy processes while the runs go, none left after."""
import os
import time

import pytest

from spark_governor.bench.cpu_hog import cpu_hog


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_hogs_burn_cpu_and_are_gone_after():
    with cpu_hog(2) as pids:
        assert len(pids) == 2
        before = {p: _cpu_ticks(p) for p in pids}
        time.sleep(1.0)
        assert all(_cpu_ticks(p) - before[p] >= 0.2 * os.sysconf("SC_CLK_TCK") for p in pids)  # each spins
    assert not any(_alive(p) for p in pids)
    with cpu_hog(0) as none:
        assert none == []


def test_a_fraction_of_a_core_is_one_process_busy_for_its_share():
    with cpu_hog(0.3) as pids:
        assert len(pids) == 1
        before = _cpu_ticks(pids[0])
        time.sleep(2.0)
        used = (_cpu_ticks(pids[0]) - before) / os.sysconf("SC_CLK_TCK")
    assert 0.2 <= used <= 1.0, used  # about 0.6 s of CPU in 2 s; a whole core would be 2 s
    assert not _alive(pids[0])


def test_an_error_inside_still_stops_them():
    with pytest.raises(RuntimeError):
        with cpu_hog(1) as pids:
            raise RuntimeError("a run failed")
    assert not _alive(pids[0])
