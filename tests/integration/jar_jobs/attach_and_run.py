"""Runs rate_count.py unchanged with ``attach()`` added around it, so one run of the same job is reported twice:
by the Python reporters (job ATTACH_JOB) and by the listener jar given on the command line (--conf).

Usage: attach_and_run.py ENDPOINT ATTACH_JOB CHECKPOINT_DIR [BATCHES]
"""
import os
import runpy
import sys

from pyspark.sql import SparkSession

from spark_governor.collectors import attach

endpoint, job = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.getOrCreate()
handle = attach(spark, job=job, endpoint=endpoint, flush_interval_s=0.5)
stop = SparkSession.stop


def stop_after_flush(self):
    handle.detach(10)  # flush the Python reporters while the context still runs
    stop(self)


SparkSession.stop = stop_after_flush
sys.argv = [os.path.join(os.path.dirname(__file__), "rate_count.py"), *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
