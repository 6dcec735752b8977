"""Executor warm-up on a real Spark standalone cluster (master + worker on 127.0.0.1; collectors.executor_warmup).

A driver with one warm executor asks for two more while no job runs. ``attach`` runs, for each executor as it
registers, a ``mapInPandas`` task preferring it: the test checks from Spark's own status store that each ran on
the executor it was for, and that the job's next Python task on each added executor then ran (with the warm-up
off, the same job runs: bench/warmup_job.py ``--no-warm``; the time it saves is a benchmark's figure,
``bench warmup``, not a test's).
"""
import pytest

from spark_governor.bench.warmup import first_tasks, format_warmup, run_job

pytestmark = pytest.mark.spark


def test_each_added_executor_is_warmed_by_a_task_that_ran_on_it(standalone_cluster):
    # the control plane is not needed here: the reporter drops its reports (counted) and the job goes on
    out = run_job(standalone_cluster.url, warm=True)
    assert len(out["first"]) == 1 and len(out["added"]) == 2, out
    assert out["ran_on"] == {e: e for e in out["added"]}, out
    probe = {t["executor"] for t in out["probe"]}
    assert set(out["added"]) <= probe and all(t["slot_ms"] > 0 for t in out["probe"]), out
    assert len(out["job_s"]) == 2 and all(s > 0 for s in out["job_s"]), out
    firsts = first_tasks(out)
    assert len(firsts["added_s"]) == 2 and firsts["warm_s"] > 0


def test_the_benchmark_table_says_what_was_not_measured():
    """``bench warmup``'s table with a variant that has no sample (e.g. every run failed to place a task)."""
    none = {"first_task_s": None, "warm_executor_s": None, "ratio_vs_warm_executor": None, "samples": 0}
    text = format_warmup({"summary": {"warm": none, "cold": {**none, "first_task_s": 3.8, "warm_executor_s": 1.1,
                                                            "ratio_vs_warm_executor": 3.45, "samples": 2},
                                      "warm_job_s": None, "saved_s": None}})
    assert "not measured" in text and "3.45" in text and text.splitlines()[2].startswith("warm ")
