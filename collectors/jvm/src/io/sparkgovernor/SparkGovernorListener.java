package io.sparkgovernor;

import org.apache.spark.SparkConf;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerApplicationEnd;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;

/**
 * spark-governor's SparkListener, attached by configuration only:
 * {@code --conf spark.extraListeners=io.sparkgovernor.SparkGovernorListener}.
 *
 * <p>Each callback only hands the event reference to the JVM's {@link Agent} (a bounded queue) and
 * returns: Spark's listener bus never waits for conversion or HTTP. When the jar does not match the
 * running Spark/Scala version, or {@code spark.governor.enabled=false}, every callback is a no-op.
 */
public class SparkGovernorListener extends SparkListener {
    private final Agent agent;

    public SparkGovernorListener(SparkConf conf) {
        this.agent = Attach.agent(conf);
    }

    public SparkGovernorListener() {
        this(null);
    }

    @Override
    public void onJobStart(SparkListenerJobStart event) {
        if (agent != null) {
            agent.offer(event);
        }
    }

    @Override
    public void onStageSubmitted(SparkListenerStageSubmitted event) {
        if (agent != null) {
            agent.offer(event);
        }
    }

    @Override
    public void onStageCompleted(SparkListenerStageCompleted event) {
        if (agent != null) {
            agent.offer(event);
        }
    }

    @Override
    public void onTaskEnd(SparkListenerTaskEnd event) {
        if (agent != null) {
            agent.offer(event);
        }
    }

    @Override
    public void onExecutorAdded(SparkListenerExecutorAdded event) {
        if (agent != null) {
            agent.offer(event);
        }
    }

    @Override
    public void onExecutorRemoved(SparkListenerExecutorRemoved event) {
        if (agent != null) {
            agent.offer(event);
        }
    }

    /**
     * The reporter's counters as JSON (queued, dropped, orphaned, sent records and reports, failed posts,
     * rejected reports, the reporter thread's CPU time), or null when reporting is off. For benchmarks and
     * debugging, e.g. from PySpark: {@code spark._jvm.io.sparkgovernor.SparkGovernorListener.reporterStats()}.
     */
    public static String reporterStats() {
        return Agent.statsJson();
    }

    /** The application ends: one last report, bounded by spark.governor.stopTimeout (default 3 s). */
    @Override
    public void onApplicationEnd(SparkListenerApplicationEnd event) {
        if (agent != null) {
            agent.stop(agent.stopTimeoutMs());
        }
    }
}
