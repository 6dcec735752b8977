"""A real Spark standalone cluster on 127.0.0.1 and the scaling job's driver: shared with
``spark-governor bench scaling-real``, so they live in ``bench.standalone``."""
from spark_governor.bench.standalone import ROOT, Driver, StandaloneCluster, spark_home  # noqa: F401

SPARK_HOME = spark_home()
