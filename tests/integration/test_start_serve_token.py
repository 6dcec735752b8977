"""``api.processes.start_serve`` (the benchmarks' control plane) requires a report token, as production does."""
import requests

from spark_governor.api.processes import free_port, new_secret, start_serve, stop_process
from spark_governor.bench.reports import gz, make_report

HEADERS = {"Content-Type": "application/json", "Content-Encoding": "gzip"}


def test_start_serve_accepts_reports_only_with_its_report_token(tmp_path):
    token, port = new_secret(), free_port()
    proc = start_serve(f"sqlite:///{tmp_path / 'sg.db'}", port, report_token=token)
    url = f"http://127.0.0.1:{port}/api/v1/reports"
    try:
        body = gz(make_report(job="bench-token", n_tasks=5, seq=1, reporter_id="r1"))
        assert requests.post(url, data=body, headers=HEADERS, timeout=10).status_code == 401
        wrong = {**HEADERS, "Authorization": f"Bearer {new_secret()}"}
        assert requests.post(url, data=body, headers=wrong, timeout=10).status_code == 401
        ok = requests.post(url, data=body, headers={**HEADERS, "Authorization": f"Bearer {token}"}, timeout=10)
        assert ok.status_code == 200, ok.text
        assert requests.get(f"http://127.0.0.1:{port}/api/v1/jobs/bench-token", timeout=10).status_code == 200
    finally:
        stop_process(proc)
    assert proc.poll() is not None
