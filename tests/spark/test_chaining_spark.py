"""Dynamic chaining on a real Spark query: the ``chaining`` policy removes a lightly loaded
optional exchange, the supervisor restarts the query from its checkpoint with the fused plan,
results stay exact and batches get faster."""
import json
import statistics

import numpy as np
import pytest
import requests

from spark_governor.api.processes import wait_for

pytestmark = pytest.mark.spark
TOKEN = "chaining-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
KEYS, SKEW, SEED = 50, 1.2, 11


def test_light_optional_exchange_is_chained_with_exact_results(spark, start_plane, tmp_path):
    from spark_governor.collectors import attach
    from spark_governor.collectors.exchanges import ExchangesApplier, OptionalExchanges
    from spark_governor.collectors.sources.zipf import register_zipf_source, zipf_ranks
    from spark_governor.collectors.supervisor import QuerySupervisor

    plane = start_plane(TOKEN, window_ms=2000, evaluation_interval_s=2.0)
    job = "chaining-spark"
    r = requests.put(f"{plane.url}/api/v1/jobs/{job}/policies/chaining?register=true", headers=AUTH, timeout=10, json={
        "mode": "act", "config": {"min_span_s": 4, "min_batches": 8, "min_change_spacing_s": 5}})
    assert r.status_code == 200, r.text

    register_zipf_source(spark)
    exchanges = OptionalExchanges()
    updates: list[tuple[int, str, int]] = []  # (batch id, key, running count) as the sink saw them

    def sink(df, batch_id):
        updates.extend((batch_id, row["key"], row["count"]) for row in df.collect())

    def build(settings):
        exchanges.set(settings.get("exchanges", {}))
        src = (spark.readStream.format("zipf").option("rowsPerSecond", 3000).option("keys", KEYS)
               .option("skew", SKEW).option("seed", SEED).option("numPartitions", 2).load())
        df = exchanges.exchange(src, "spread", partitions=24)  # 24 small tasks per batch: a cost chaining removes
        return (df.groupBy("key").count().writeStream.outputMode("update").foreachBatch(sink)
                .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="1 second").start())

    supervisor = QuerySupervisor(spark, build, {"exchanges": {}}, min_spacing_s=5)
    first_run = supervisor.query
    handle = attach(spark, job=job, endpoint=plane.url, flush_interval_s=0.5, appliers={
        "exchanges": ExchangesApplier(exchanges, restart=lambda value: supervisor.restart(exchanges=value),
                                      query=lambda: supervisor.query)})
    try:
        # the policy sees both stages lightly loaded and removes the exchange
        try:
            wait_for(lambda: exchanges.settings().get("spread") == "removed", 240, 1,
                     "the chaining policy to remove the optional exchange")
        except AssertionError as exc:  # say what the policy saw
            seen = {path: requests.get(f"{plane.url}/api/v1/jobs/{job}{path}", timeout=10).json()
                    for path in ("", "/stages?windows=3", "/events", "/decisions")}
            raise AssertionError(f"{exc}; control plane saw: {json.dumps(seen)[:6000]}") from None
        decisions = requests.get(f"{plane.url}/api/v1/jobs/{job}/decisions", timeout=10).json()["decisions"]
        d = next(x for x in decisions if x["policy"] == "chaining")
        assert d["new_value"] == {"spread": "removed"} and d["old_value"] == {"spread": "present"}
        assert d["inputs"]["rho_at_merged_partitions"][0] < 0.9
        assert any(k.startswith("chain.") for k in d["prediction"])
        wait_for(lambda: any(x["knob"] == "exchanges" and x["status"] == "applied" for x in requests.get(
            f"{plane.url}/api/v1/jobs/{job}/directives", timeout=10).json()["directives"]), 60, 1,
            "the directive acknowledged as applied")
        second_run = supervisor.query
        assert second_run.runId != first_run.runId and second_run.id == first_run.id
        wait_for(lambda: len(second_run.recentProgress) >= 10, 120, 1, "batches of the fused plan")
    finally:
        supervisor.stop()
        handle.detach()
    # exact results: the running count per key at the last committed batch equals a plain count of
    # every row the source produced up to that batch's end offset
    last, total = _last_commit(tmp_path / "ckpt")
    final: dict[str, tuple[int, int]] = {}
    for batch_id, key, count in updates:
        if batch_id <= last and (key not in final or final[key][0] <= batch_id):
            final[key] = (batch_id, count)
    ranks, _ = zipf_ranks(0, total, KEYS, SKEW, SEED)
    expected = {f"k{r}": int(c) for r, c in enumerate(np.bincount(ranks, minlength=KEYS + 1)) if c}
    assert {k: c for k, (_, c) in final.items()} == expected
    # the fused plan's batches are faster (one shuffle and one stage of 24 tasks fewer)
    before = [p.durationMs["triggerExecution"] for p in first_run.recentProgress if p.numInputRows][2:]
    after = [p.durationMs["triggerExecution"] for p in second_run.recentProgress if p.numInputRows][2:]
    assert len(before) >= 4 and len(after) >= 4, (before, after)
    assert statistics.median(after) < statistics.median(before), (before, after)


def _last_commit(ckpt) -> tuple[int, int]:
    """(batch id, end offset in rows) of the last committed batch, from the checkpoint's logs."""
    commits = sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    last = commits[-1]
    lines = (ckpt / "offsets" / str(last)).read_text().splitlines()
    return last, int(json.loads(lines[-1])["rows"])
