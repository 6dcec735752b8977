"""An ordinary PySpark streaming job with one long micro-batch, run by spark-submit: it does not import spark-governor.

Batch 0 reads a first file. Then a second file comes, and batch 1's ``foreachBatch`` sleeps SLEEP_S seconds after its
Spark job (far longer than the test's latency bound); it marks ``sleeping`` and ``woke`` in MARKS. No file comes after
it, so the query then waits IDLE_S seconds with no new data before it stops.
Usage: long_batch.py INPUT_DIR CHECKPOINT_DIR MARKS_DIR SLEEP_S IDLE_S
"""
import os
import sys
import time

from pyspark.sql import SparkSession

inputs, checkpoint, marks = sys.argv[1], sys.argv[2], sys.argv[3]
sleep_s, idle_s = float(sys.argv[4]), float(sys.argv[5])


def mark(name: str) -> None:
    with open(os.path.join(marks, name), "w") as f:
        f.write(str(time.time()))


def add_file(i: int) -> None:
    tmp = os.path.join(marks, f"part-{i}.txt")
    with open(tmp, "w") as f:
        f.write("\n".join(str(k) for k in range(1000)))
    os.rename(tmp, os.path.join(inputs, f"part-{i}.txt"))  # whole, at once


def each_batch(df, batch_id):
    df.count()  # this micro-batch's Spark job: its start carries the batch id
    if batch_id == 1:
        mark("sleeping")
        time.sleep(sleep_s)
        mark("woke")


spark = SparkSession.builder.appName("long-batch").getOrCreate()
add_file(0)
query = (spark.readStream.format("text").load(inputs).writeStream.foreachBatch(each_batch)
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
deadline = time.time() + 240
while (query.lastProgress is None or query.lastProgress["batchId"] < 0) and time.time() < deadline:
    time.sleep(0.2)
add_file(1)
while not os.path.exists(os.path.join(marks, "woke")) and time.time() < deadline and query.isActive:
    time.sleep(0.2)
time.sleep(idle_s)
query.stop()
sys.stdout.write("batches: %d\n" % len([p for p in query.recentProgress if p["numInputRows"]]))  # one write(2)
sys.stdout.flush()
spark.stop()
