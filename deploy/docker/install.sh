#!/bin/sh
# Install steps of the control-plane image: deploy/docker/Dockerfile runs this as root in python:3.11-slim, and
# tests/integration/test_deploy_docker.py runs it in a clean virtualenv (PYTHON=<venv>/bin/python).
# Usage: install.sh SOURCE_DIR   (a copy of the repository, as the Docker build context gives it)
set -eu
src="${1:?usage: install.sh SOURCE_DIR}"
python="${PYTHON:-python}"
# the control plane needs no Spark: the package with its PostgreSQL driver
"$python" -m pip install "${src}[postgres]"
"$python" -m pip check
"$python" -m spark_governor --version
