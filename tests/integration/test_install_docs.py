"""Issue #15: the install line the docs give works in a fresh virtualenv.

The first ``pip install`` line of the README's quickstart and of docs/getting-started.md must be the
same, and running it in a new venv (on a copy of the checkout, reusing pip's cache: about a minute)
must give a working ``spark-governor`` and a driver side that imports PySpark, pandas and pyarrow:
``pip install -e .`` alone would not.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
IGNORE = shutil.ignore_patterns(".venv", ".git", "site", "bench-results", "*.egg-info", "__pycache__", ".pytest_cache",
                                "spark-warehouse", "build", "*.db", "*.db-*")


def documented_install(path: Path) -> str:
    """The first ``pip install`` command in a bash block of ``path`` (its comment removed)."""
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S):
        for line in block.splitlines():
            cmd = line.split("#", 1)[0].strip()
            if cmd.startswith("pip install"):
                return cmd
    raise AssertionError(f"{path}: no pip install line")


def test_readme_and_getting_started_give_the_same_install_line():
    readme, guide = documented_install(ROOT / "README.md"), documented_install(ROOT / "docs" / "getting-started.md")
    assert readme == guide == "pip install -e '.[spark]'"


def test_the_documented_install_line_works_in_a_fresh_venv(tmp_path):
    line = documented_install(ROOT / "README.md")
    src = tmp_path / "checkout"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run(["bash", "-c", line], cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    py = str(venv / "bin" / "python")
    check = ("import pyspark, pandas, pyarrow; from spark_governor import attach; "
             "import spark_governor.api.app, spark_governor.api.docs_ui as d, os; "
             "assert os.path.exists(os.path.join(d.swagger_ui_dir(), 'swagger-ui-bundle.js')); print(pyspark.__version__)")
    r = subprocess.run([py, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().startswith("4."), r.stderr[-3000:]
    r = subprocess.run([str(venv / "bin" / "spark-governor"), "--version"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "spark-governor" in r.stdout
