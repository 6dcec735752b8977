"""deploy/kubernetes renders with ``kubectl kustomize`` (offline, no cluster), and every dashboard of
dashboards/*.json is a ConfigMap for Grafana's sidecar whose JSON equals the file (issue #17)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    kubectl = shutil.which("kubectl")
    require(kubectl is not None, "kubectl (with kustomize) for `kubectl kustomize deploy/kubernetes`")
    out = subprocess.run([kubectl, "kustomize", "deploy/kubernetes"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def test_every_dashboard_is_a_sidecar_configmap_equal_to_its_json(rendered):
    maps = {d["metadata"]["name"]: d for d in by_kind(rendered, "ConfigMap")
            if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"}
    files = sorted((ROOT / "dashboards").glob("*.json"))
    assert files
    seen = set()
    for f in files:
        holders = [name for name, cm in maps.items() if f.name in cm.get("data", {})]
        assert len(holders) == 1, f"{f.name}: add it to dashboards/kustomization.yaml (configMapGenerator)"
        cm = maps[holders[0]]
        assert cm["data"][f.name] == f.read_text()  # byte for byte what the repository holds
        assert json.loads(cm["data"][f.name]) == json.loads(f.read_text())
        assert cm["metadata"]["namespace"] == "spark-governor"
        seen.add(holders[0])
    assert seen == set(maps)  # no ConfigMap of a dashboard that no longer exists


def test_control_plane_deployment_service_secrets_and_servicemonitor(rendered):
    kinds = sorted({d["kind"] for d in rendered})
    assert kinds == ["ConfigMap", "Deployment", "Namespace", "PodDisruptionBudget", "PrometheusRule", "Secret",
                     "Service", "ServiceMonitor"]
    assert all(d["metadata"].get("namespace") == "spark-governor" for d in rendered if d["kind"] != "Namespace")
    [dep] = by_kind(rendered, "Deployment")
    [pdb] = by_kind(rendered, "PodDisruptionBudget")
    # two replicas, one kept through voluntary disruptions (docs/deployment.md#replicas)
    assert dep["spec"]["replicas"] == 2 and pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    [main] = pod["containers"]
    [migrate] = pod["initContainers"]
    assert migrate["command"][:3] == ["spark-governor", "db", "upgrade"]
    assert "--no-migrate" in main["command"] and main["image"] == migrate["image"] == "spark-governor:0.1.0"
    for probe in ("readinessProbe", "livenessProbe"):
        assert main[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert main["securityContext"]["allowPrivilegeEscalation"] is False
    secrets = {d["metadata"]["name"]: d for d in by_kind(rendered, "Secret")}
    configmaps = {d["metadata"]["name"] for d in by_kind(rendered, "ConfigMap")}
    refs = [(e["name"], e["valueFrom"]["secretKeyRef"]) for c in (main, migrate) for e in c["env"] if "valueFrom" in e]
    assert {n for n, _ in refs} == {"SPARK_GOVERNOR_DB", "SPARK_GOVERNOR_TOKENS"}
    for _, ref in refs:  # generated (hash-suffixed) names are referenced, keys exist
        assert ref["key"] in secrets[ref["name"]]["data"]
    assert all(src["configMapRef"]["name"] in configmaps for src in main["envFrom"])
    # every $(VAR) in the command comes from env or envFrom
    config = next(d for d in by_kind(rendered, "ConfigMap") if d["metadata"]["name"] == main["envFrom"][0]["configMapRef"]["name"])
    known = {e["name"] for e in main["env"]} | set(config["data"])
    assert {a[2:-1] for a in main["command"] if a.startswith("$(")} <= known
    [svc] = by_kind(rendered, "Service")
    assert svc["spec"]["ports"][0]["targetPort"] == main["ports"][0]["name"] == "http"
    assert all(pod_labels == svc["spec"]["selector"][k] for k, pod_labels in
               dep["spec"]["template"]["metadata"]["labels"].items() if k in svc["spec"]["selector"])
    [sm] = by_kind(rendered, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert all(svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert sm["spec"]["endpoints"][0]["port"] == "http" and sm["spec"]["endpoints"][0]["path"] == "/metrics"
    # the shipped rules (the SLO's recording rules and the alerts) for the Prometheus Operator
    [rule] = by_kind(rendered, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load((ROOT / "deploy" / "prometheus" / "spark-governor.rules.yml").read_text())
