"""deploy/docker, checked without a container daemon (issue #17): the compose file and the Grafana provisioning
parsed and checked against each other and against the dashboards' datasource variable, ``docker compose config``
where the client has the compose plugin, and the Dockerfile's install steps (deploy/docker/install.sh) run in a
clean virtualenv, ending with the image's entry point serving /healthz and its HEALTHCHECK passing."""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml

from spark_governor.api.processes import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
COMPOSE = DOCKER / "compose.yaml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def mounts(service: dict) -> dict[str, Path]:
    """container path -> host path (resolved against the compose file's folder) of bind mounts."""
    out = {}
    for v in service.get("volumes", []):
        host, container = v.split(":")[:2]
        if host.startswith("."):
            out[container] = (DOCKER / host).resolve()
    return out


def test_compose_services_ports_and_healthchecks(compose):
    services = compose["services"]
    assert set(services) == {"control-plane", "postgres", "prometheus", "grafana"}
    for name, s in services.items():
        for port in s.get("ports", []):
            assert re.fullmatch(r"127\.0\.0\.1:\d+(-\d+)?:\d+", port), f"{name}: publish {port!r} on 127.0.0.1 only"
        assert "healthcheck" in s, name
    cp = services["control-plane"]
    assert cp["build"] == {"context": "../..", "dockerfile": "deploy/docker/Dockerfile"}
    assert (DOCKER / cp["build"]["context"] / cp["build"]["dockerfile"]).resolve() == DOCKER / "Dockerfile"
    assert cp["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "/usr/local/lib/spark-governor-healthcheck.py" in cp["healthcheck"]["test"]
    db = cp["environment"]["SPARK_GOVERNOR_DB"]
    assert db.startswith("postgresql+psycopg://") and "@postgres:5432/" in db
    # scalable (docker compose up --scale control-plane=N): a range of host ports, none fixed to one container
    assert cp["ports"] == [f"127.0.0.1:8787-8790:{cp['environment']['SPARK_GOVERNOR_PORT']}"]
    assert "container_name" not in cp
    # Prometheus scrapes every replica by the service's DNS name and the container port
    prom_mounts = mounts(services["prometheus"])
    prom = yaml.safe_load(prom_mounts["/etc/prometheus/prometheus.yml"].read_text())
    sds = [sd for job in prom["scrape_configs"] for sd in job["dns_sd_configs"]]
    assert sds == [{"names": ["control-plane"], "type": "A", "port": int(cp["environment"]["SPARK_GOVERNOR_PORT"]),
                    "refresh_interval": "15s"}]
    assert prom["scrape_configs"][0].get("metrics_path", "/metrics") == "/metrics"
    for name, s in services.items():
        for container, host in mounts(s).items():
            assert host.exists(), f"{name}: {host} (mounted at {container}) missing"


def test_compose_config_where_the_client_allows_it():
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("no `docker compose` plugin on this machine: the compose file is checked by the other tests")
    out = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _datasource_refs(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "datasource":
                yield path, v
            yield from _datasource_refs(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _datasource_refs(v, f"{path}[{i}]")


def test_grafana_provisioning_matches_the_dashboards(compose):
    grafana = mounts(compose["services"]["grafana"])
    provisioning = grafana["/etc/grafana/provisioning"]
    [ds] = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert ds["type"] == "prometheus" and ds["isDefault"] is True and ds["url"] == "http://prometheus:9090"
    [provider] = yaml.safe_load((provisioning / "dashboards" / "spark-governor.yaml").read_text())["providers"]
    assert provider["type"] == "file"
    dashboards_dir = grafana[provider["options"]["path"]]
    assert dashboards_dir == ROOT / "dashboards"
    files = sorted(dashboards_dir.glob("*.json"))
    assert len(files) >= 3
    for f in files:
        d = json.loads(f.read_text())
        assert 38 <= d["schemaVersion"] <= 41, f"{f.name}: schemaVersion of Grafana 10-12"
        variables = {v["name"]: v for v in d["templating"]["list"]}
        var = variables["datasource"]
        assert var["type"] == "datasource" and var["query"] == ds["type"], f.name  # resolves to the provisioned one
        for path, ref in _datasource_refs(d):
            if path.startswith(".templating.list[0]"):
                continue
            if isinstance(ref, dict) and ref.get("type") == "grafana":  # built-in annotations, not a datasource
                assert ref.get("uid") == "-- Grafana --", (f.name, path)
                continue
            assert ref == {"type": "prometheus", "uid": "${datasource}"}, (f.name, path, ref)
        for panel in d["panels"]:
            if panel.get("type") != "row":
                assert panel.get("datasource") == {"type": "prometheus", "uid": "${datasource}"}, (f.name, panel["title"])


def test_dockerfile_is_non_root_with_a_healthz_healthcheck():
    text = (DOCKER / "Dockerfile").read_text()
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK .*\n?.*spark-governor-healthcheck\.py", text, re.M)
    assert "/healthz" in (DOCKER / "healthcheck.py").read_text()
    assert "deploy/docker/install.sh" in text and "EXPOSE 8787" in text


def _copy_context(dst: Path) -> Path:
    """The Docker build context: the repository less deploy/docker/Dockerfile.dockerignore's patterns."""
    patterns = [p.strip() for p in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]

    def ignored(rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p.removeprefix("**/")) for p in patterns)

    def ignore(folder, names):
        base = Path(folder).relative_to(ROOT).as_posix()
        return [n for n in names if ignored(n if base == "." else f"{base}/{n}")]

    shutil.copytree(ROOT, dst, ignore=ignore, symlinks=True)
    return dst


def test_dockerfile_install_steps_in_a_clean_venv(tmp_path):
    """install.sh as the Dockerfile runs it, into a fresh virtualenv (pip's cache is reused), then the image's
    entry point on 127.0.0.1 and its HEALTHCHECK script."""
    src = _copy_context(tmp_path / "context")
    assert not (src / ".venv").exists() and not (src / "tests").exists() and (src / "pyproject.toml").exists()
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PYTHON=str(python), PATH=f"{env_dir / 'bin'}:{env['PATH']}", PIP_DISABLE_PIP_VERSION_CHECK="1")
    out = subprocess.run(["sh", str(src / "deploy" / "docker" / "install.sh"), str(src)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1].startswith("spark-governor")  # --version
    port = free_port()
    env.update(SPARK_GOVERNOR_HOST="127.0.0.1", SPARK_GOVERNOR_PORT=str(port),
               SPARK_GOVERNOR_DB=f"sqlite:///{tmp_path / 'cp.db'}", SPARK_GOVERNOR_TOKENS="ops=docker-test-token,reporter:report=docker-report-token")
    healthcheck = [str(python), str(src / "deploy" / "docker" / "healthcheck.py")]
    assert subprocess.run(healthcheck, env=env, capture_output=True).returncode == 1  # nothing serves yet
    proc = subprocess.Popen(["sh", str(src / "deploy" / "docker" / "entrypoint.sh")], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "serve.log", "w"))
    try:
        wait_for(lambda: subprocess.run(healthcheck, env=env, capture_output=True).returncode == 0, 90, 1,
                 "the image's HEALTHCHECK to pass")
        import requests

        from spark_governor.bench.reports import gz, make_report

        # a driver's report with the report token, as the listener jar sends it
        r = requests.post(f"http://127.0.0.1:{port}/api/v1/reports", data=gz(make_report(job="docker-job")),
                          headers={"Content-Encoding": "gzip", "Authorization": "Bearer docker-report-token"}, timeout=10)
        assert r.status_code == 200, r.text
        jobs = requests.get(f"http://127.0.0.1:{port}/api/v1/jobs", timeout=5,
                            headers={"Authorization": "Bearer docker-test-token"}).json()["jobs"]
        assert [j["name"] for j in jobs] == ["docker-job"]
    finally:
        proc.terminate()
        proc.wait(30)
    assert sys.executable != str(python)
