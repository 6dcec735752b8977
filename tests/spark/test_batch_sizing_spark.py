"""Batch sizing on real local Spark: the fixed-point policy changes a running query's interval
through the paced Zipf source, re-stabilizes after a 2× rate step and shrinks the interval after
the rate falls; the results equal a static-interval run on the same rows. The supervised restart
(file source, processingTime trigger) resumes at the next batch id without losing or repeating a
row, and the paced file wrapper delivers every file exactly once."""
import os
import threading
import time
from collections import Counter

import pytest
import requests

from spark_governor.bench.batch_sizing_spark import progress_batches
from spark_governor.policies.base import BatchStats
from spark_governor.policies.batch_interval import completed_points
from spark_governor.collectors.batch_interval import BatchIntervalApplier, TriggerRestartApplier
from spark_governor.collectors.sources.paced import register_paced_sources
from spark_governor.collectors.sources.pacing import write_control
from spark_governor.collectors.supervisor import QuerySupervisor, RestartRefused, _committed_batch_id
from spark_governor.api.processes import wait_for

pytestmark = pytest.mark.spark
TOKEN = "batch-sizing-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RATE = 1000.0  # rows/s before and after the step
COST_S = 2e-4  # extra processing per row in the sink: p = Spark's overhead + COST_S·N


def write_rate(path, rate):
    with open(path + ".tmp", "w") as f:
        f.write(str(rate))
    os.replace(path + ".tmp", path)


def stable_pair_index(batches):
    """Index of the first batch that, with the next one, has processing ≤ interval."""
    for k, (a, b) in enumerate(zip(batches, batches[1:])):
        if a.processing_s <= a.interval_s and b.processing_s <= b.interval_s:
            return k
    return None


def counting_sink(totals: Counter, batch_ids: list, cost_s: float = 0.0):
    def sink(batch_df, batch_id):
        n = 0
        for row in batch_df.groupBy("key").count().collect():
            totals[row["key"]] += row["count"]
            n += row["count"]
        batch_ids.append(batch_id)
        time.sleep(cost_s * n)
    return sink


def test_fixed_point_restabilizes_after_rate_step_and_matches_static_run(spark, start_plane, tmp_path):
    from spark_governor.collectors import attach

    plane = start_plane(TOKEN, window_ms=1000, evaluation_interval_s=0.5)
    job = "batch-sizing"
    r = requests.put(f"{plane.url}/api/v1/jobs/{job}/policies/fixed-point?register=true", headers=AUTH, timeout=10,
                     json={"mode": "act", "config": {"max_value": 20}})
    assert r.status_code == 200, r.text
    register_paced_sources(spark)
    rate_file, control = str(tmp_path / "rate"), str(tmp_path / "interval")
    write_rate(rate_file, RATE)
    totals, ids = Counter(), []
    df = (spark.readStream.format("zipf-paced").option("rowsPerSecond", RATE).option("rateFile", rate_file)
          .option("intervalFile", control).option("keys", 100).option("seed", 3).option("numPartitions", 2)
          .option("maxQueueingSeconds", 5).load())
    handle = attach(spark, job=job, endpoint=plane.url, flush_interval_s=0.25,
                    appliers={"batch_interval": BatchIntervalApplier(control)})
    query = (df.writeStream.foreachBatch(counting_sink(totals, ids, COST_S))
             .option("checkpointLocation", str(tmp_path / "ckpt")).queryName("batch_sizing").start())
    try:
        def directed():  # batches cut with an interval the control plane chose, the latest two stable
            bs = [b for b in progress_batches(query) if os.path.exists(control)]
            return len(bs) >= 6 and stable_pair_index(bs[-2:]) == 0
        wait_for(directed, 300, 0.5, "converged batches at the first rate")
        step_ms = int(time.time() * 1000)
        write_rate(rate_file, 2 * RATE)
        # counted from the first batch cut after the policy's first decision on a batch at the new rate (its
        # rows all arrived after the step: the source counts a new rate from the rate file's write,
        # collectors.sources.rate_file). How many batches the plane needs to see that batch (window 1 s,
        # evaluation 0.5 s, flush 0.25 s) depends on the interval the policy had settled on (2-3 batches of
        # 0.35 s, 1 of 1 s); the policy's re-stabilization does not.
        def cut_after(bs, ms):
            return [b for b in bs if b.interval_s is not None and b.trigger_ms - b.interval_s * 1000 >= ms]

        def first_decision_ms():
            new_rate = cut_after(progress_batches(query), step_ms)
            if not new_rate:
                return None
            ds = requests.get(f"{plane.url}/api/v1/jobs/{job}/decisions", timeout=10,
                              params={"knob": "batch_interval", "since_ms": step_ms}).json()["decisions"]
            return min((d["created_ms"] for d in ds if d["inputs"]["batch_id"] >= new_rate[0].batch_id),
                       default=None)
        wait_for(lambda: first_decision_ms() is not None, 120, 0.5, "a decision on a batch at the new rate")
        react_ms = first_decision_ms()
        wait_for(lambda: len(cut_after(progress_batches(query), react_ms)) >= 8, 300, 0.5,
                 "8 batches after the decision")
        after_step = cut_after(progress_batches(query), react_ms)
        k = stable_pair_index(after_step)
        trace = [(b.batch_id, b.interval_s, round(b.processing_s, 2)) for b in after_step]
        print(f"decided {react_ms - step_ms} ms after the step; then (batch id, interval s, processing s):", trace)
        assert react_ms - step_ms < 10_000, react_ms - step_ms  # the plane saw the step within seconds
        # stable again on consecutive batches within the 8 awaited: 5 on a quiet machine; on a loaded one the batches
        # hover at the interval (processing 0.39–0.56 s against 0.42–0.52 s, CI 2026-12-07) and took 7
        assert k is not None and k <= 6, trace
        high = [b.interval_s for b in after_step]
        fall_ms = int(time.time() * 1000)
        write_rate(rate_file, RATE)
        wait_for(lambda: any(b.interval_s < max(high) for b in progress_batches(query)
                             if b.trigger_ms > fall_ms + 1000), 300, 0.5, "a shorter interval after the fall")
        print("after the fall:", [(b.batch_id, b.interval_s, round(b.processing_s, 2))
                                  for b in progress_batches(query) if b.trigger_ms > fall_ms])
        # visible in the API and /metrics: the applied interval and each batch's interval and processing time
        directives = requests.get(f"{plane.url}/api/v1/jobs/{job}/directives", timeout=10).json()
        wait_for(lambda: any(d["knob"] == "batch_interval" and d["status"] == "applied" for d in
                             requests.get(f"{plane.url}/api/v1/jobs/{job}/directives", timeout=10).json()["directives"]),
                 30, 0.5, "an applied batch_interval directive")
        api = requests.get(f"{plane.url}/api/v1/jobs/{job}/batches", timeout=10).json()["batches"]
        assert any("batchInterval" in b["durations_ms"] and "triggerExecution" in b["durations_ms"] for b in api)
        metrics = requests.get(f"{plane.url}/metrics", timeout=10).text
        assert f'spark_governor_batch_interval_seconds{{source="directive",spark_job="{job}"}}' in metrics
        assert any(line.startswith("spark_governor_batch_processing_seconds{") and f'spark_job="{job}"' in line
                   for line in metrics.splitlines()), directives
    finally:
        query.stop()
        handle.detach()
    assert len(ids) == len(set(ids))
    total = sum(totals.values())
    # the same rows with one static interval (and a high rate so that it takes a few seconds)
    static_totals, static_ids = Counter(), []
    static_control = str(tmp_path / "static-interval")
    write_control(static_control, 1.0)
    df2 = (spark.readStream.format("zipf-paced").option("rowsPerSecond", 20_000).option("totalRows", total)
           .option("intervalFile", static_control).option("keys", 100).option("seed", 3).option("numPartitions", 2)
           .load())
    q2 = (df2.writeStream.foreachBatch(counting_sink(static_totals, static_ids))
          .option("checkpointLocation", str(tmp_path / "ckpt-static")).start())
    try:
        wait_for(lambda: sum(static_totals.values()) >= total, 300, 0.5, "the static run to reach the same rows")
        time.sleep(2)
    finally:
        q2.stop()
    assert static_totals == totals


def test_trigger_restart_resumes_at_next_batch_without_loss(spark, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    seen, ids = [], []

    def add_file(i):
        tmp = tmp_path / f".f{i}"
        tmp.write_text("".join(f"{i}-{j}\n" for j in range(50)))
        os.replace(tmp, data / f"f{i:04d}.txt")

    def sink(batch_df, batch_id):
        ids.append(batch_id)
        seen.extend(r["value"] for r in batch_df.collect())

    def build(settings):
        w = (spark.readStream.format("text").load(str(data)).writeStream.foreachBatch(sink)
             .option("checkpointLocation", settings["checkpoint"]))
        if settings.get("trigger_interval_s"):
            w = w.trigger(processingTime=f"{int(settings['trigger_interval_s'] * 1000)} milliseconds")
        return w.start()

    for i in range(3):
        add_file(i)
    sup = QuerySupervisor(spark, build, {"checkpoint": str(tmp_path / "ckpt"), "trigger_interval_s": 0.5},
                          min_spacing_s=3600, resume_timeout_s=120)
    applier = TriggerRestartApplier(sup)
    try:
        wait_for(lambda: len(seen) == 150, 240, 0.3, "the first files")
        add_file(3)
        wait_for(lambda: len(seen) == 200, 120, 0.3, "the fourth file")
        old_run = sup.query.runId
        # the commit log is read, not only the progress (the sink has run before its batch's commit is written)
        wait_for(lambda: _committed_batch_id(sup.query) == max(ids), 60, 0.1, "the batch's commit in the log")

        def arrive_after_the_stop():  # files the old query cannot take: read by the restarted query
            # sup.query waits for the restart's lock: the session's active queries show the new run
            wait_for(lambda: any(q.runId != old_run for q in spark.streams.active), 120, 0.05, "the restarted query")
            for i in range(4, 6):
                add_file(i)

        arrivals = threading.Thread(target=arrive_after_the_stop, daemon=True)
        arrivals.start()
        status, message = applier(2.0)
        arrivals.join(5)
        assert status == "applied", message
        result = sup.results[-1]
        assert result.verified and result.resumed_batch_id == result.previous_batch_id + 1, result
        assert sup.query.runId != old_run and sup.settings["trigger_interval_s"] == 2.0 and result.cost_s > 0
        add_file(6)
        wait_for(lambda: len(seen) == 350, 120, 0.3, "every row after the restart")
        # a second restart within the spacing is refused, clearly
        status, message = applier(1.0)
        assert status == "failed" and "refused" in message
        with pytest.raises(RestartRefused, match="next allowed in"):
            sup.restart(trigger_interval_s=1.0)
    finally:
        sup.stop()
    assert sorted(seen) == sorted(f"{i}-{j}" for i in range(7) for j in range(50))  # none lost, none twice
    assert ids == list(range(ids[0], ids[0] + len(ids)))  # consecutive batch ids across the restart


def test_paced_files_deliver_every_file_once_at_the_directed_interval(spark, tmp_path):
    register_paced_sources(spark)
    data = tmp_path / "files"
    data.mkdir()
    control = str(tmp_path / "interval")
    write_control(control, 1.5)
    lines = []
    df = (spark.readStream.format("paced-files").option("path", str(data)).option("intervalFile", control).load())
    q = df.writeStream.foreachBatch(lambda b, i: lines.extend(r["value"] for r in b.collect())).option(
        "checkpointLocation", str(tmp_path / "ckpt")).start()
    try:
        for i in range(6):
            (tmp_path / "tmp").write_text(f"a{i}\nb{i}\n")
            os.replace(tmp_path / "tmp", data / f"{i:03d}")
            time.sleep(0.5)
        wait_for(lambda: len(lines) == 12, 240, 0.3, "every line")
        batches = progress_batches(q)
        assert batches and all(b.interval_s == 1.5 for b in batches[1:])
    finally:
        q.stop()
    assert sorted(lines) == sorted([f"a{i}" for i in range(6)] + [f"b{i}" for i in range(6)])


def test_fixed_point_through_the_control_plane_restarts_a_file_query(spark, start_plane, tmp_path):
    """actuator=restart end to end: the policy's interval reaches a file-source query as a supervised
    restart with a new processingTime trigger; every row is committed exactly once across the restarts,
    batch ids stay consecutive, and the batch after a restart carries the restart in its interval. The
    sink is idempotent per batch id, as ``collectors.supervisor`` asks: a batch the restart interrupts
    (always running here: 0.5 s trigger, > 0.6 s batches) is re-run with the same id and the same rows."""
    import threading

    from spark_governor.collectors import attach

    plane = start_plane(TOKEN, window_ms=1000, evaluation_interval_s=0.5)
    job = "batch-sizing-restart"
    r = requests.put(f"{plane.url}/api/v1/jobs/{job}/policies/fixed-point?register=true", headers=AUTH, timeout=10,
                     json={"mode": "act", "config": {"actuator": "restart", "restart_min_spacing_s": 5,
                                                     "max_value": 10}})
    assert r.status_code == 200, r.text
    data = tmp_path / "in"
    data.mkdir()
    by_batch, replays = {}, []  # batch id → its rows (a re-run replaces them, as an idempotent sink would)

    def sink(batch_df, batch_id):
        rows = sorted(r["value"] for r in batch_df.collect())
        if batch_id in by_batch:
            replays.append((batch_id, rows == by_batch[batch_id]))
        by_batch[batch_id] = rows
        time.sleep(0.6)  # p ≈ Spark's overhead + 0.6 s > the initial 0.5 s interval

    builds = []  # wall-clock ms of every (re)start: the old query is stopped just before

    def build(settings):
        builds.append(time.time() * 1000)
        w = (spark.readStream.format("text").load(str(data)).writeStream.foreachBatch(sink)
             .option("checkpointLocation", settings["checkpoint"]).queryName("restart_e2e"))
        if settings.get("trigger_interval_s"):
            w = w.trigger(processingTime=f"{int(settings['trigger_interval_s'] * 1000)} milliseconds")
        return w.start()

    written, stop = [], threading.Event()

    def feed():  # a file every 0.2 s until told to stop
        i = 0
        while not stop.is_set():
            tmp = tmp_path / f".f{i}"
            tmp.write_text("".join(f"{i}-{j}\n" for j in range(20)))
            os.replace(tmp, data / f"f{i:05d}.txt")
            written.extend(f"{i}-{j}" for j in range(20))
            i += 1
            stop.wait(0.2)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    sup = QuerySupervisor(spark, build, {"checkpoint": str(tmp_path / "ckpt"), "trigger_interval_s": 0.5},
                          min_spacing_s=5, resume_timeout_s=120)
    applier = TriggerRestartApplier(sup)
    handle = attach(spark, job=job, endpoint=plane.url, flush_interval_s=0.25,
                    appliers={"batch_interval": applier})
    try:
        wait_for(lambda: any(res.verified for res in sup.results), 300, 0.5, "a restart decided by the control plane")
        result = next(res for res in sup.results if res.verified)
        assert result.resumed_batch_id == result.previous_batch_id + 1
        assert sup.settings["trigger_interval_s"] > 0.5  # p > 0.5 s: the interval grew (x = p/ρ)
        wait_for(lambda: any(d["knob"] == "batch_interval" and d["status"] == "applied" and "restart" in (d["message"] or "")
                             for d in requests.get(f"{plane.url}/api/v1/jobs/{job}/directives",
                                                   timeout=10).json()["directives"]), 60, 0.5,
                 "the directive acknowledged as applied by a restart")
        resumed = result.resumed_batch_id
        wait_for(lambda: any(b["batch_id"] == resumed for b in
                             requests.get(f"{plane.url}/api/v1/jobs/{job}/batches", timeout=10).json()["batches"]),
                 60, 0.5, "the resumed batch reported")
        batches = {b["batch_id"]: b for b in requests.get(f"{plane.url}/api/v1/jobs/{job}/batches",
                                                         timeout=10).json()["batches"]}
        if resumed - 1 in batches:  # the interval the policy sees for the resumed batch spans the restart
            restart_ms = builds[sup.results.index(result) + 1]  # builds[0] is the first start
            assert batches[resumed - 1]["trigger_ms"] <= restart_ms <= batches[resumed]["trigger_ms"]
            pair = tuple(BatchStats(i, batches[i]["trigger_ms"], 1.0, 1, None, None) for i in (resumed - 1, resumed))
            [(x, _)] = completed_points(pair, snap=False)
            assert x == (batches[resumed]["trigger_ms"] - batches[resumed - 1]["trigger_ms"]) / 1000.0
    finally:
        stop.set()
        feeder.join(5)
    try:
        wait_for(lambda: sum(map(len, by_batch.values())) >= len(written), 120, 0.5, "every written row")
        time.sleep(1.0)
    finally:
        handle.detach()
        sup.stop()
    assert all(same for _, same in replays), replays  # a re-run batch holds the rows it held before
    assert sorted(r for rows in by_batch.values() for r in rows) == sorted(written)  # none lost, none twice
    assert sorted(by_batch) == list(range(min(by_batch), max(by_batch) + 1))
