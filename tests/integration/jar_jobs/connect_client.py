"""A Spark Connect client's streaming query (no spark-governor import: the Connect server has the jar by --conf).

Usage: connect_client.py sc://HOST:PORT CHECKPOINT_DIR STOP_FILE; prints one line per completed batch.
"""
import os
import sys
import time

from pyspark.sql import SparkSession

url, checkpoint, stop_file = sys.argv[1:4]
spark = SparkSession.builder.remote(url).getOrCreate()
query = (spark.readStream.format("rate").option("rowsPerSecond", 1000).option("numPartitions", 2).load()
         .selectExpr("value % 20 AS key").groupBy("key").count()
         .writeStream.queryName("connect_rate_count").outputMode("update").format("noop")
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
seen = -1
while not os.path.exists(stop_file) and query.isActive:
    progress = query.lastProgress
    if progress is not None and progress.batchId != seen:
        seen = progress.batchId
        print("batch", seen, progress.numInputRows, flush=True)
    time.sleep(0.5)
query.stop()
spark.stop()
