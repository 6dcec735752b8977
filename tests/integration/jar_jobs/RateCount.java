import java.nio.file.Files;
import java.nio.file.Paths;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;

/**
 * An ordinary Java Structured Streaming job (compiled by tests/integration/test_listener_jar.py): it knows nothing
 * of spark-governor, which attaches by --jars/--conf only. Runs until STOP_FILE exists.
 * Usage: RateCount CHECKPOINT_DIR STOP_FILE
 */
public final class RateCount {
    public static void main(String[] args) throws Exception {
        SparkSession spark = SparkSession.builder().appName("java-rate-count").getOrCreate();
        Dataset<Row> src = spark.readStream().format("rate").option("rowsPerSecond", 1000)
                .option("numPartitions", 4).load();
        StreamingQuery query = src.selectExpr("value % 50 AS key").groupBy("key").count()
                .writeStream().queryName("java_rate_count").outputMode("update").format("noop")
                .option("checkpointLocation", args[0]).trigger(Trigger.ProcessingTime("1 second")).start();
        while (!Files.exists(Paths.get(args[1])) && query.isActive()) {
            Thread.sleep(200);
        }
        query.stop();
        spark.stop();
    }
}
