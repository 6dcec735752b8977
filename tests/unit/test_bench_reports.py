"""``bench.reports.make_report``: the report of a reporter that sends every ``seconds`` seconds holds that many
job-seconds (issue #42's ``bench load --report-seconds``), validated by the wire like any report."""
import json

import pytest

from spark_governor.bench.reports import make_report
from spark_governor.policies.wire import parse_report


def _tasks(report: dict) -> int:
    return sum(w["tasks"] for w in report["template_windows"])


@pytest.mark.parametrize("schema_version", [3, 2])
def test_a_report_of_n_seconds_holds_n_job_seconds(schema_version):
    one = make_report("rs-a", n_tasks=40, seq=5, reporter_id="rs-one", partitions=20, start_ms=1_800_000_000_000,
                      batches=1, schema_version=schema_version)
    five = make_report("rs-a", n_tasks=40, seq=5, reporter_id="rs-five", partitions=20,
                       start_ms=1_800_000_000_000, batches=1, seconds=5, schema_version=schema_version)
    assert len(one["batches"]) == 1 and len(five["batches"]) == 5
    assert [b["trigger_ms"] for b in five["batches"]] == [1_800_000_000_000 + 1000 * k for k in range(5)]
    assert len({b["batch_id"] for b in five["batches"]}) == 5
    if schema_version == 3:
        assert (_tasks(one), _tasks(five)) == (40, 200)
        assert len(five["stages"]) == 5 * len(one["stages"])
        assert max(s["completion_ms"] for s in five["stages"]) < 1_800_000_005_000
    else:
        assert (len(one["tasks"]), len(five["tasks"])) == (40, 200)
    parse_report(json.dumps(five))  # a report the control plane takes


def test_seconds_must_be_positive():
    with pytest.raises(ValueError, match="seconds"):
        make_report(seconds=0)
