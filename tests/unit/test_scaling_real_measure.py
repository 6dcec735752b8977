"""``bench.scaling_real_measure``: what ``bench scaling-real`` measures of the cluster, on hand-made
samples whose answers are computed by hand, and the control plane's ``/cluster`` endpoint read
defensively (a real app on SQLite: an unknown job answers 404 → the bench's own measurement)."""
import pytest

from spark_governor.bench.scaling_real_measure import (
    fetch_cluster,
    merge_cluster,
    overhead_from_progress,
    provisioning_from_samples,
    service_from_stages,
)

T0 = 1000.0


def samples(counts):
    """Per-second samples from ``T0``: counts[i] executors at T0 + i."""
    return [{"t": T0 + i, "executors": n} for i, n in enumerate(counts)]


def test_provisioning_per_executor_from_the_directive_to_the_first_sample_counting_it():
    # directive at T0 + 3 (1 → 3): the 2nd executor appears at T0 + 12, the 3rd at T0 + 15
    s = samples([1] * 12 + [2] * 3 + [3] * 10)
    p = provisioning_from_samples([{"created_ms": (T0 + 3) * 1000, "old_value": 1, "new_value": 3}], s)
    assert p["samples"] == 2
    assert p["register_s"]["median"] == pytest.approx(10.5) and p["register_s"]["p90"] == pytest.approx(11.7)
    assert p["first_task_s"] == {"median": None, "p90": None}


def test_provisioning_ignores_scale_ins_and_stops_at_the_next_directive():
    # up 1 → 2 at T0 + 2, superseded at T0 + 5 by a scale-in before the executor came (at T0 + 8)
    s = samples([1] * 8 + [2] * 5)
    decisions = [{"created_ms": (T0 + 2) * 1000, "old_value": 1, "new_value": 2},
                 {"created_ms": (T0 + 5) * 1000, "old_value": 2, "new_value": 1}]
    assert provisioning_from_samples(decisions, s)["samples"] == 0


def test_overhead_is_the_intercept_of_the_batch_durations_fitted_to_the_model():
    # durations made by the model: 2.5 s + ⌈4/slots⌉ × rows/4 × 150 µs, batches on 1, 2 and 4 executors;
    # addBatch = duration − 0.3 s; one batch without rows and one after t_end are left out
    s = samples([1] * 20 + [2] * 20 + [4] * 30)
    prog = []
    for k, rows in enumerate([8000, 16000, 32000, 16000, 64000, 64000, 16000, 8000]):
        t = T0 + 8 * k + 0.5
        n = 1 if t < T0 + 20 else 2 if t < T0 + 40 else 4
        dur = 2.5 + -(-4 // n) * rows / 4 * 150e-6
        prog.append({"batch": k, "rows": rows, "trigger_ms": t * 1000, "processing_ms": dur * 1000,
                     "add_batch_ms": (dur - 0.3) * 1000})
    prog.append({"batch": 8, "rows": 0, "trigger_ms": (T0 + 64.5) * 1000, "processing_ms": 100, "add_batch_ms": 50})
    prog.append({"batch": 9, "rows": 8000, "trigger_ms": (T0 + 80.5) * 1000, "processing_ms": 9000})
    o = overhead_from_progress(prog, s, 4, T0, T0 + 70)
    assert o["samples"] == 8 and o["mean_s"] == pytest.approx(2.5)
    assert o["fit"]["row_cost_s"] == pytest.approx(150e-6) and o["fit"]["noise_sigma"] == pytest.approx(0, abs=1e-9)
    assert o["outside_add_batch_s"]["samples"] == 8 and o["outside_add_batch_s"]["mean_s"] == pytest.approx(0.3)
    assert [p[2] for p in o["batch_points"]] == [1, 1, 1, 2, 2, 4, 4, 4]
    assert o["batch_points"][0] == [0.5, 8000, 1, pytest.approx(2.5 + 8000 * 150e-6)]


def test_overhead_fit_needs_spread_in_the_work():
    s = samples([2] * 40)
    prog = [{"batch": k, "rows": 8000, "trigger_ms": (T0 + 8 * k) * 1000, "processing_ms": 5000} for k in range(4)]
    o = overhead_from_progress(prog, s, 4, T0, T0 + 30)
    assert o["samples"] == 0 and o["mean_s"] is None and o["fit"]["samples"] == 4


def test_service_per_row_counts_every_stage_against_the_source_rows():
    stages = [{"key": "map", "summary": {"tasks": 40, "service": {"mean": 0.25, "cv": 0.2}, "records_in": 80_000,
                                         "busy_seconds": 10.0}},
              {"key": "agg", "summary": {"tasks": 40, "service": {"mean": 0.05, "cv": 0.5}, "records_in": 4000,
                                         "busy_seconds": 2.0}},
              {"key": "idle", "summary": None}]
    svc = service_from_stages(stages)
    assert svc["row_cost_s"] == pytest.approx(12.0 / 80_000) and svc["task_service_cv"] == 0.2
    assert [t["key"] for t in svc["templates"]] == ["map", "agg"]
    assert service_from_stages([]) == {"templates": [], "row_cost_s": None, "task_service_cv": None}


def test_merge_takes_the_control_plane_part_only_when_it_has_samples():
    bench = {"provisioning": {"samples": 2, "register_s": {"median": 10.0, "p90": 12.0}},
             "warmup": {"samples": 0, "factor": None, "tasks": None, "duration_s": None, "work_factor": None},
             "driver_overhead": {"samples": 5, "mean_s": 3.0}}
    plane = {"provisioning": {"samples": 0, "register_s": {"median": None, "p90": None}},
             "warmup": {"samples": 3, "factor": 1.8, "tasks": 2, "duration_s": 4.0},
             "driver_overhead": {"samples": 9, "mean_s": 2.5}, "prediction_error": {"samples": 0}}
    m = merge_cluster(plane, bench)
    assert m["sources"] == {"provisioning": "bench", "warmup": "control-plane", "driver_overhead": "control-plane"}
    assert m["provisioning"]["register_s"]["median"] == 10.0 and m["warmup"]["factor"] == 1.8
    assert m["driver_overhead"]["mean_s"] == 2.5 and m["endpoint"] is True
    none = merge_cluster(None, bench)
    assert set(none["sources"].values()) == {"bench"} and none["endpoint"] is False


class _Answer:
    def __init__(self, r):
        self.status_code, self._json = r.status_code, r.json

    def json(self):
        return self._json

    def raise_for_status(self):
        if self.status_code >= 400:
            raise RuntimeError(self.status_code)


def test_fetch_cluster_reads_a_404_as_no_measurement(sqlite_url):
    from spark_governor.aggregators import db
    from spark_governor.api.app import Settings, create_app

    db.upgrade(sqlite_url)
    eng = db.make_engine(sqlite_url)
    client = create_app(eng, Settings()).test_client()
    try:
        def get(url, timeout):
            return _Answer(client.get(url.removeprefix("http://plane")))
        assert fetch_cluster("http://plane", "no-such-job", get=get) is None
    finally:
        eng.dispose()


@pytest.mark.parametrize("policy", ["kingman", "threshold", "utilization-target"])
def test_every_governed_policy_of_scaling_real_gets_a_config_its_schema_accepts(policy):
    from spark_governor.bench.scaling_real import GOVERNED, policy_config
    from spark_governor.policies.registry import get_policy, validate_config

    assert policy in GOVERNED
    cfg = policy_config(policy, 8.0, 4, {"max_step": 2} if policy == "kingman" else None)
    valid = validate_config(get_policy(policy), cfg)
    assert (valid.min_value, valid.max_value) == (1, 4)
    assert valid.trigger_interval_s == 8.0  # every executor policy sizes against the trigger interval
