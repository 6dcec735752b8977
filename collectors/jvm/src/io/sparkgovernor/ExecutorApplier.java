package io.sparkgovernor;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.SparkContext;
import org.apache.spark.status.api.v1.ExecutorSummary;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Sets the number of executors through the SparkContext developer API, as
 * {@code collectors/appliers.py ExecutorApplier} does over py4j.
 *
 * <p>Scale-up: {@code requestTotalExecutors(n, 0, {})}. Scale-down: lower the target the same way
 * and kill executors that run no task, oldest ids first, and only while no Spark job runs (an idle
 * executor may hold shuffle output the running batch still needs). Executors that cannot be killed
 * yet are killed by {@link #reconcile()}, which the reporter calls every cycle. In local mode the
 * knob is not actuatable. Called from the reporter thread only; never throws.
 */
final class ExecutorApplier {
    private final SparkContext sc;
    Integer target;

    ExecutorApplier(SparkContext sc) {
        this.sc = sc;
    }

    String notActuatable() {
        return sc.master().startsWith("local") ? "local mode" : null;
    }

    List<String> executorIds() {
        if (notActuatable() != null) {
            return new ArrayList<>();
        }
        return new ArrayList<>(CollectionConverters.asJava(sc.getExecutorIds()));
    }

    List<String> idleExecutorIds() {
        List<String> idle = new ArrayList<>();
        for (ExecutorSummary s : CollectionConverters.asJava(sc.statusStore().executorList(true))) {
            if (!"driver".equals(s.id()) && s.activeTasks() == 0) {
                idle.add(s.id());
            }
        }
        idle.sort((a, b) -> a.length() != b.length() ? Integer.compare(a.length(), b.length()) : a.compareTo(b));
        return idle;
    }

    private boolean requestTotal(int n) {
        scala.collection.immutable.Map<String, Object> none = scala.collection.immutable.Map$.MODULE$.<String, Object>empty();
        return sc.requestTotalExecutors(n, 0, none);
    }

    /** Kill idle executors while more than the target are registered; returns those killed. */
    List<String> reconcile() {
        List<String> none = new ArrayList<>();
        if (target == null || notActuatable() != null) {
            return none;
        }
        int excess = executorIds().size() - target;
        if (excess <= 0 || sc.statusTracker().getActiveJobIds().length > 0) {
            return none;
        }
        List<String> idle = idleExecutorIds();
        List<String> victims = new ArrayList<>(idle.subList(0, Math.min(excess, idle.size())));
        if (victims.isEmpty()) {
            return none;
        }
        boolean killed = sc.killExecutors(CollectionConverters.asScala(victims).toList());
        if (killed) {
            requestTotal(target);  // killExecutors lowered the target; keep ours
            return victims;
        }
        return none;
    }

    /** Apply a directive's value; returns {status, message}. */
    String[] apply(Object value) {
        String reason = notActuatable();
        if (reason != null) {
            return new String[] {"not_actuatable", "not actuatable: " + reason};
        }
        try {
            int n;
            if (value instanceof Number && ((Number) value).doubleValue() == Math.rint(((Number) value).doubleValue())) {
                n = ((Number) value).intValue();
            } else if (value instanceof String) {
                n = Integer.parseInt(((String) value).trim());
            } else {
                return new String[] {"failed", "invalid executor count " + value};
            }
            if (n < 0) {
                return new String[] {"failed", "invalid executor count " + value};
            }
            int current = executorIds().size();
            if (!requestTotal(n)) {
                return new String[] {"failed", "cluster manager refused a total of " + n + " executors"};
            }
            target = n;
            List<String> killed = reconcile();
            String message = "requested " + n + " executors (had " + current + ")";
            if (!killed.isEmpty()) {
                message += "; killed idle " + String.join(", ", killed);
            } else if (n < current) {
                message += "; busy executors are released when idle";
            }
            return new String[] {"applied", message};
        } catch (Exception e) {
            String m = String.valueOf(e.getMessage());
            return new String[] {"failed", e.getClass().getSimpleName() + ": " + (m.length() > 300 ? m.substring(0, 300) : m)};
        }
    }
}
