package io.sparkgovernor;

import org.apache.spark.SparkConf;
import org.apache.spark.sql.streaming.StreamingQueryListener;

/**
 * spark-governor's StreamingQueryListener, attached by configuration only:
 * {@code --conf spark.sql.streaming.streamingQueryListeners=io.sparkgovernor.SparkGovernorQueryListener}.
 * Spark creates one per session (every Spark Connect session too); all share the JVM's {@link Agent}.
 * Each callback only queues the event object (progress, started, idle, terminated); its JSON is rendered by the
 * reporter thread, which keeps each query's state between micro-batches ({@link QueryStates}).
 */
public class SparkGovernorQueryListener extends StreamingQueryListener {
    private final Agent agent;

    public SparkGovernorQueryListener(SparkConf conf) {
        this.agent = Attach.agent(conf);
    }

    public SparkGovernorQueryListener() {
        this(null);
    }

    @Override
    public void onQueryStarted(QueryStartedEvent event) {
        if (agent != null) {
            agent.offer(new Agent.QueryEvent("started", event));
        }
    }

    @Override
    public void onQueryProgress(QueryProgressEvent event) {
        if (agent != null) {
            agent.offer(event.progress());
        }
    }

    @Override
    public void onQueryIdle(QueryIdleEvent event) {
        if (agent != null) {
            agent.offer(new Agent.QueryEvent("idle", event));
        }
    }

    @Override
    public void onQueryTerminated(QueryTerminatedEvent event) {
        if (agent != null) {
            agent.offer(new Agent.QueryEvent("terminated", event));
        }
    }
}
