"""``GET /api/v1/jobs/<job>/cluster``: what the job taught about its cluster (a Flask blueprint).

The answer is ``aggregators.cluster_profile.measure`` computed at request time on the job's latest
run (read-only): provisioning delay of executors added by scale-out decisions (``register_s``:
directive sent → executor registered; ``first_task_s``: registered → first task finished on it;
seconds, median and 90th percentile), the warm-up of new executors (``factor``: their first tasks'
service time over the steady one of the same stage; ``tasks`` and ``duration_s``, seconds: how long
it lasts), the driver's per-batch overhead (batch duration − its tasks' span, seconds) and the
running prediction error of the decisions that took effect (mean |predicted − measured| / measured
of the mean record latency). Unknown job: 404 (``queries.NotFound``, handled by the app).
"""
from __future__ import annotations

from flask import Blueprint, jsonify
from sqlalchemy.engine import Engine

from spark_governor.aggregators import cluster_profile, queries

_NUM = {"type": ["number", "null"]}
_DIST = {"type": "object", "additionalProperties": False, "required": ["median", "p90"],
         "properties": {"median": _NUM, "p90": _NUM}}


def _obj(props: dict) -> dict:
    return {"type": "object", "additionalProperties": False, "required": sorted(props), "properties": props}


#: JSON schema of the answer (``api.openapi``); seconds unless named a factor or ratio
CLUSTER_SCHEMA = _obj({
    "job": {"type": "string"}, "run_id": {"type": ["string", "null"]},
    "provisioning": _obj({"samples": {"type": "integer"}, "register_s": _DIST, "first_task_s": _DIST,
                          "register_source": {"type": ["string", "null"],
                                              "enum": ["executor_added", "first_launch", "mixed", None]}}),
    "warmup": _obj({"samples": {"type": "integer"}, "factor": _NUM, "tasks": {"type": ["integer", "null"]},
                    "duration_s": _NUM, "work_factor": _NUM, "startup_s": _NUM, "contention_factor": _NUM,
                    "cold_samples": {"type": "integer"}, "cold_work_factor": _NUM,
                    "cold_tasks": {"type": ["integer", "null"]}, "idle_work_factor": _NUM}),
    "driver_overhead": _obj({"samples": {"type": "integer"}, "mean_s": _NUM, "median_s": _NUM, "p90_s": _NUM}),
    "prediction_error": _obj({"samples": {"type": "integer"}, "mean_abs_rel": _NUM,
                              "last": {"type": ["object", "null"]}}),
})


def build_cluster_blueprint(engine: Engine) -> Blueprint:
    bp = Blueprint("cluster", __name__)

    @bp.get("/api/v1/jobs/<job>/cluster")
    def get_cluster(job: str):
        with engine.connect() as conn:
            j = queries.job_row(conn, job)
            return jsonify(cluster_profile.measure(conn, job, j.id).to_json())

    return bp
