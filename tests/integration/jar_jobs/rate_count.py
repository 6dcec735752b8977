"""An ordinary PySpark streaming job, run by spark-submit: it does not import spark-governor.

The listener jar attaches to it by ``--jars``/``--conf`` only (tests/integration/test_listener_jar.py).
Usage: rate_count.py CHECKPOINT_DIR [BATCHES]
"""
import sys
import time

from pyspark.sql import SparkSession

checkpoint = sys.argv[1]
batches = int(sys.argv[2]) if len(sys.argv) > 2 else 8
spark = SparkSession.builder.appName("rate-count").getOrCreate()
src = spark.readStream.format("rate").option("rowsPerSecond", 2000).option("numPartitions", 2).load()
query = (src.selectExpr("value % 50 AS key").groupBy("key").count()
         .writeStream.queryName("rate_count").outputMode("update").format("noop")
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
deadline = time.time() + 300
while len([p for p in query.recentProgress if p.numInputRows]) < batches and time.time() < deadline:
    time.sleep(0.2)
query.stop()
# one write(2), so that no line Spark logs to the same file lands inside it
sys.stdout.write("batches: %d\n" % len([p for p in query.recentProgress if p.numInputRows]))
sys.stdout.flush()
spark.stop()
