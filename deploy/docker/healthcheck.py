"""HEALTHCHECK of the control-plane image: exit 0 when GET /healthz answers {"status": "ok"}, else 1 (no curl in
python:3.11-slim; standard library only)."""
import json
import os
import sys
import urllib.request

port = os.environ.get("SPARK_GOVERNOR_PORT", "8787")
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=4) as resp:
        ok = resp.status == 200 and json.loads(resp.read()).get("status") == "ok"
except Exception as exc:  # connection refused, timeout, 503
    print(f"unhealthy: {exc}", file=sys.stderr)
    ok = False
sys.exit(0 if ok else 1)
