"""The ``dalton`` and ``mixed-routing`` policies (knob partition_plan) on JobViews built from
reported partition statistics; plus the registered partitioners, ``plan`` CLI and the drift
benchmark at a tiny size."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from spark_governor.policies.base import DirectiveState, JobView, PartitionBatchStats
from spark_governor.policies.registry import get_policy, validate_config
from spark_governor.policies.partitioning.base import KeyCounts
from spark_governor.policies.partitioning.registry import get_partitioner
from spark_governor.policies.partitioning.spark_hash import spark_partition
from spark_governor.collectors.plan_placement import realize


def batch(i, key_counts, P=4, other_keys=0, other_tuples=0, block_loads=()):
    total = sum(c for _, c in key_counts) + other_tuples
    return PartitionBatchStats(batch_id=i, received_ms=1000 * i, algorithm="hash", partitions=P, reduce=P,
                               tuples=total, keys=len(key_counts) + other_keys, key_counts=tuple(key_counts),
                               other_keys=other_keys, other_tuples=other_tuples, block_loads=tuple(block_loads))


def view(stats, directive=None):
    d = {"partition_plan": DirectiveState("partition_plan", 1, directive, 1, "applied")} if directive else {}
    return JobView(job="j", now_ms=10_000, window_s=60, partition_stats=tuple(stats), directives=d)


SKEWED = [("hot", 6000)] + [(f"k{i}", 40) for i in range(100)]


def test_dalton_policy_splits_the_heavy_hitter_and_is_reproducible():
    cls = get_policy("dalton")
    cfg = validate_config(cls, {"seed": 3})
    stats = [batch(i, SKEWED, other_keys=50, other_tuples=500) for i in range(4)]
    props = cls().evaluate(view(stats), cfg)
    assert len(props) == 1 and props[0].knob == "partition_plan"
    value = props[0].value
    assert list(value["assignment"]) == ["hot"] and len(value["assignment"]["hot"]["blocks"]) > 1
    assert props[0].prediction["max_mean_load"] < 1.2
    assert cls().evaluate(view(stats), cfg)[0].value == value                     # seeded: same plan
    # the job realises it on the next batch's counts: the hot key is spread, the rest hashed
    nxt = KeyCounts.from_mapping(dict(SKEWED))
    plan = realize(value, nxt)
    loads = plan.block_loads()
    assert loads.max() / loads.mean() < 1.3 and plan.split_keys() == ["hot"]
    # already planned from this batch → nothing new
    assert cls().evaluate(view(stats, value), cfg) == []


def test_dalton_policy_uniform_stream_is_hashing():
    """The paper (digest §8.5 test 4): no heavy hitter, so the plan is hashing. The default
    variant's cold-floor guard re-routes keys only off combiners whose hashed load exceeds 0.95
    of the mean, and ends below hashing's max/mean."""
    from spark_governor.policies.partitioning.base import stable_hashes

    data = [(f"k{j}", 10) for j in range(200)]
    stats = [batch(i, data) for i in range(3)]
    paper = get_policy("dalton-paper")
    props = paper().evaluate(view(stats), validate_config(paper, {}))
    assert props[0].value["assignment"] == {} and props[0].value["q_table"] == {}
    cls = get_policy("dalton")
    props = cls().evaluate(view(stats), validate_config(cls, {}))
    hashed = np.bincount(stable_hashes([k for k, _ in data]) % 4, minlength=4) * 10
    over = {d for d in range(4) if hashed[d] > 0.95 * hashed.mean()}
    moved = props[0].value["assignment"]
    assert moved and all(int(stable_hashes([k])[0] % 4) in over for k in moved)
    assert props[0].prediction["max_mean_load"] < min(1.05, hashed.max() / hashed.mean())


def _spark_skew(P=4):
    # keys whose Spark hash piles onto one partition
    keys = [f"u{i}" for i in range(400) if spark_partition(P, 0, f"u{i}") == 0][:12]
    rest = [f"r{i}" for i in range(80)]
    return [(k, 100) for k in keys] + [(k, 20) for k in rest]


def test_mixed_routing_policy_balances_within_theta_and_bounds_the_table():
    cls = get_policy("mixed-routing")
    cfg = validate_config(cls, {"theta_max": 0.08, "table_max": 12, "state_unit": "rows"})
    kc = _spark_skew()
    props = cls().evaluate(view([batch(0, kc)]), cfg)
    assert len(props) == 1
    v = props[0].value
    assert v["status"] in ("ok", "fallback_mintable", "exact") and len(v["table"]) <= 12
    loads = np.zeros(4)
    for k, c in kc:
        loads[v["table"].get(k, spark_partition(4, 0, k))] += c
    assert loads.max() <= 1.08 * loads.mean() + 1e-9
    assert props[0].prediction["max_mean_load"] <= 1.08 + 1e-9
    # balanced under the installed table → no new proposal, nothing moves
    v2 = dict(v, based_on={"batch_id": -1, "received_ms": -1})
    assert cls().evaluate(view([batch(1, kc)], v2), cfg) == []


def test_mixed_routing_policy_keeps_residual_load_in_place():
    """Unreported ('other') tuples stay where the job measured them (immovable residual load);
    only reported keys get table entries. crc32: x4, x6, x10 → 0, x0 → 1."""
    cls = get_policy("mixed-routing")
    cfg = validate_config(cls, {"theta_max": 0.1, "hash": "crc32"})
    kc = [("x4", 300), ("x6", 300), ("x10", 200), ("x0", 100)]
    measured = [900, 200, 300, 100]                 # residual 100/100/300/100
    props = cls().evaluate(view([batch(0, kc, other_keys=40, other_tuples=600, block_loads=measured)]), cfg)
    assert len(props) == 1
    v = props[0].value
    assert v["status"] == "ok" and set(v["table"]) <= {"x4", "x6", "x10", "x0"}
    loads = v["predicted_loads"]
    assert sum(loads) == 1500 and max(loads) <= 1.1 * 375 + 1e-9 and loads[2] >= 300


def test_registered_partitioners_keep_state_across_batches():
    d = get_partitioner("dalton-paper", seed=1)
    v = get_partitioner("dalton", seed=1)
    m = get_partitioner("mixed", theta_max=0.08, plan_on="previous")
    b = KeyCounts.from_mapping({"hot": 5000, **{f"k{i}": 50 for i in range(100)}}).with_arrival(0)
    ratios, variant = [], []
    for _ in range(4):
        p = d.plan(b, 8)
        loads = p.block_loads()
        ratios.append(loads.max() / loads.mean())
        loads = v.plan(b, 8).block_loads()
        variant.append(loads.max() / loads.mean())
        m.plan(b, 8)
    assert ratios[-1] < ratios[0] and d.hot_keys() == ["hot"]      # the paper's agent learns over batches
    assert max(variant) <= 1.05 and "hot" in v.hot_keys()           # the default is balanced from the first
    assert set(d.agent(8).Q) == {d.index.ids["hot"]} and v.index.ids["hot"] in v.agent(8).Q  # rows by key id
    # "hot" alone is 5000 > (1 + θmax)·L̄ = 1350: best effort, "hot" on its own instance with at
    # most θmax·R̄ = 0.08·5000/7 more, the others within (1 + θmax)·R̄
    assert m.last is not None and m.report()["routing"]["status"] == "best_effort"
    loads = m.report()["routing"]["loads"]
    home = int(m.last.owner[m.last_keys.index("hot")])
    assert 5000 <= loads[home] <= 5000 + 0.08 * 5000 / 7 + 1e-9
    assert max(x for d, x in enumerate(loads) if d != home) <= 1.08 * 5000 / 7 + 1e-9


def test_plan_cli_dalton_and_mixed_with_previous(tmp_path):
    from spark_governor.api.cli import main
    counts = tmp_path / "c.csv"
    counts.write_text("key,count\n" + "\n".join(f"k{i},{c}" for i, c in enumerate([90, 80, 70, 60, 50, 40, 30, 20, 10, 10, 10, 10])))
    r = CliRunner().invoke(main, ["plan", "dalton", "--counts", str(counts), "-p", "4", "--arrival", "shuffled",
                                  "--seed", "2", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert sum(d["block_loads"]) == 480 and "dalton" in d
    again = json.loads(CliRunner().invoke(main, ["plan", "dalton", "--counts", str(counts), "-p", "4", "--arrival",
                                                 "shuffled", "--seed", "2", "--json"]).output)
    assert again["assignment"] == d["assignment"]
    r = CliRunner().invoke(main, ["plan", "mixed", "--counts", str(counts), "-p", "4", "--json"])
    assert r.exit_code == 0, r.output
    first = tmp_path / "first.json"
    first.write_text(r.output)
    doc = json.loads(r.output)
    assert doc["routing"]["status"] == "ok" and max(doc["block_loads"]) <= 1.08 * 120 + 1e-9
    counts2 = tmp_path / "c2.csv"
    counts2.write_text("\n".join(f"k{i},{c}" for i, c in enumerate([10, 10, 10, 10, 50, 40, 30, 20, 90, 80, 70, 60])))
    r = CliRunner().invoke(main, ["plan", "mixed", "--counts", str(counts2), "-p", "4", "--previous", str(first), "--json"])
    assert r.exit_code == 0, r.output
    doc2 = json.loads(r.output)["routing"]
    assert doc2["migration_cost"] >= 0 and doc2["table_size"] <= 3000
    bad = tmp_path / "bad.json"
    bad.write_text('{"counts": {"k1": "x"}}')
    r = CliRunner().invoke(main, ["plan", "mixed", "--counts", str(counts2), "-p", "4", "--previous", str(bad)])
    assert r.exit_code != 0 and "counts.k1" in r.output
    r = CliRunner().invoke(main, ["plan", "dalton", "--counts", str(counts2), "-p", "4", "--previous", str(first)])
    assert r.exit_code != 0 and "--previous" in r.output


def test_drift_bench_tiny(tmp_path):
    from spark_governor.api.cli import main
    out, png = tmp_path / "d.json", tmp_path / "d.png"
    r = CliRunner().invoke(main, ["bench", "partitioners-drift", "--z", "1.5", "--tuples", "5000", "--batches", "4",
                                  "--drift-every", "2", "--settle", "1", "--algorithms",
                                  "hash,dalton,dalton-paper,mixed,mixed-paper,mintable", "--dalton-hot-factor", "8",
                                  "--out", str(out), "--plot", str(png)])
    assert r.exit_code == 0, r.output
    rep = json.loads(out.read_text())
    series = rep["cases"][0]["series"]
    assert set(series) == {"hash", "dalton", "dalton-paper", "dalton-paper-hh8", "mixed", "mixed-paper", "mintable"}
    assert all(len(v) == 4 for v in series.values())
    assert all(row["table_size"] is not None for row in series["mixed"]) and png.exists()
    assert "max/mean" in r.output and "plan s med" in r.output and "mixed goals:" in r.output
    summ = rep["cases"][0]["summary"]
    assert {"planning_s_median", "planning_s_p95", "planning_cpu_s_median"} <= set(summ["mixed"])
    # z = 1.5 over 8 partitions: the top key alone is ~3× the mean — best effort vs the paper's infeasible
    assert summ["mixed"]["statuses"] == ["best_effort"] and "infeasible" in summ["mixed-paper"]["statuses"]
    assert summ["mixed"]["worst_planned_over_lower_bound"] <= 1.1


def test_routed_count_restore_pins_the_version_of_the_first_uncommitted_batch(tmp_path):
    """A restarted query replays batch 4 (commits 0..3 exist): it must use the version in force
    for batch 4 (v2, effective from 2), not the later v3 (from 5); tokens route to the table."""
    from spark_governor.collectors.routing import RoutedCount, VersionStore, tokens_for
    store = VersionStore(tmp_path / "rt")
    tables = [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 3}]
    for v, (eff, table) in enumerate(zip((0, 1, 2, 5), tables)):
        store.write({"version": v, "effective_from_batch": eff, "table": table,
                     "tokens": tokens_for(table, 4), "migrations": []})
    (tmp_path / "ckpt" / "commits").mkdir(parents=True)
    for b in range(4):
        (tmp_path / "ckpt" / "commits" / str(b)).write_text("v1")
    rc = RoutedCount(None, "key", 4, tmp_path / "rt", planner=None)
    assert rc.version == 3                          # current.json before the restart
    rc.restore(str(tmp_path / "ckpt"))
    assert rc.version == 2 and rc.table == {"a": 1, "b": 2} and store.read()["version"] == 2
    for k, d in rc.table.items():
        assert spark_partition(4, rc.tokens.get(k, 0), k) == d


def test_dalton_policy_hot_factor_routes_more_keys():
    """``hot_factor`` κ: keys with count ≥ total/(κ·n) go through the bandit (ours; κ = 1 is the
    paper). Total 10 500 over n = 4: "mid" (1 500) is below 1/n = 2 625 but above 1/(2n)."""
    cls = get_policy("dalton-paper")
    data = [("hot", 4500), ("mid", 1500)] + [(f"k{i}", 40) for i in range(100)]
    stats = [batch(i, data, other_keys=50, other_tuples=500) for i in range(3)]
    paper = cls().evaluate(view(stats), validate_config(cls, {"seed": 1}))[0].value
    wider = cls().evaluate(view(stats), validate_config(cls, {"seed": 1, "hot_factor": 2}))[0].value
    assert set(paper["assignment"]) == {"hot"} and set(wider["assignment"]) == {"hot", "mid"}
    import pytest
    from spark_governor.policies.registry import InvalidConfig
    with pytest.raises(InvalidConfig, match="hot_factor"):
        validate_config(cls, {"hot_factor": 0.5})


def test_drift_bench_without_a_plot_writes_no_png(tmp_path, monkeypatch):
    """``--plot ''`` skips the PNG (it used to save one named ``.png`` in the working directory)."""
    from spark_governor.api.cli import main
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["bench", "partitioners-drift", "--z", "1.5", "--tuples", "2000", "--batches", "2",
                                  "--drift-every", "1", "--settle", "0", "--algorithms", "hash,dalton",
                                  "--out", "d.json", "--plot", ""])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json"]
    assert r.output.rstrip().endswith("wrote d.json")


def test_save_figure_refuses_an_empty_path():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from spark_governor.bench.output import save_figure
    with pytest.raises(ValueError, match="no path"):
        save_figure(plt.figure(), "")
