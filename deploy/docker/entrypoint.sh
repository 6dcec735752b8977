#!/bin/sh
# Entry point of the control-plane image: `spark-governor serve` configured from the environment.
#   SPARK_GOVERNOR_DB       SQLAlchemy URL (postgresql+psycopg://user:password@host:5432/db for production)
#   SPARK_GOVERNOR_TOKENS   API tokens for writes, NAME=SECRET[,NAME=SECRET...] (read by serve itself)
#   SPARK_GOVERNOR_MIGRATE  true: run the schema migrations at start (one replica); false: `spark-governor db upgrade`
#                           runs elsewhere (a Kubernetes init container)
#   SPARK_GOVERNOR_HOST / SPARK_GOVERNOR_PORT   address to bind (0.0.0.0:8787 in the container)
# Further arguments are passed to serve, e.g. --window-seconds 5 --evaluation-seconds 10.
set -eu
migrate="--no-migrate"
if [ "${SPARK_GOVERNOR_MIGRATE:-true}" = "true" ]; then
  migrate="--migrate"
fi
exec spark-governor serve --host "${SPARK_GOVERNOR_HOST:-0.0.0.0}" --port "${SPARK_GOVERNOR_PORT:-8787}" \
  --db "${SPARK_GOVERNOR_DB:?set SPARK_GOVERNOR_DB}" "$migrate" "$@"
