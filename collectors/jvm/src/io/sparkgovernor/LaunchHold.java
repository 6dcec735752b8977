package io.sparkgovernor;

import java.util.Collections;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.SparkContext;
import org.apache.spark.SparkStageInfo;
import org.apache.spark.SparkStatusTracker;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

import scala.Option;

/**
 * Keeps an executor added while a job runs from taking the running stages' waiting tasks cold
 * ({@code spark.plugins=io.sparkgovernor.LaunchHold}, issue #14).
 *
 * <p>The driver offers an executor no task between its registration and its {@code LaunchedExecutor}
 * message, which the executor sends once its {@code Executor} is built, executor plugins included
 * (Spark's {@code CoarseGrainedSchedulerBackend}: free cores 0 until then). Without this plugin a new
 * executor takes the waiting tasks of the batch in flight at once, and its first task runs ×2–4 as long
 * as on a warm executor (Python worker start, imports, class loading): on the standalone cluster a batch
 * of 4 tasks on 2 executors ran 14.6 s after a scale-out to 4, where the 2 alone ran it in 6.5 s (run
 * 99, 2026-11-28). With it, the executor plugin's {@code init} asks the driver plugin, every
 * {@code spark.governor.launchHoldPoll} (200 ms), whether the active stages still have tasks not
 * launched, no more of them than {@code spark.governor.launchHoldWaves} (1) × the tasks running
 * ({@link #hold}); it returns (the executor launches) once not, or after {@code
 * spark.governor.launchHoldMax} (10 s) in all. The old executors take the waiting tasks; the new one
 * launches idle and {@code collectors/executor_warmup.py} warms it ({@link #launchedAt} tells it when).
 * Any error lets the executor launch at once: the hold never stops an executor from working.
 */
public final class LaunchHold implements SparkPlugin {
    /** Executor id → wall-clock ms the driver let it launch. */
    static final Map<String, Long> LAUNCHED = new ConcurrentHashMap<>();
    /** Executor id → ms it was held. */
    static final Map<String, Long> HELD_MS = new ConcurrentHashMap<>();
    static final String ASK = "may-launch";

    @Override
    public DriverPlugin driverPlugin() {
        return new Driver();
    }

    @Override
    public ExecutorPlugin executorPlugin() {
        return new Executor();
    }

    /** Wall-clock ms the driver let executor {@code id} launch, or -1 (not yet, or not held). */
    public static long launchedAt(String id) {
        Long at = LAUNCHED.get(id);
        return at == null ? -1L : at;
    }

    /** Ms executor {@code id} was held before it launched, or -1. */
    public static long heldMs(String id) {
        Long ms = HELD_MS.get(id);
        return ms == null ? -1L : ms;
    }

    /** {tasks of the active stages not launched yet, tasks running} (Spark's status tracker). */
    public static int[] taskCounts(SparkContext sc) {
        SparkStatusTracker tracker = sc.statusTracker();
        int pending = 0;
        int running = 0;
        for (int id : tracker.getActiveStageIds()) {
            Option<SparkStageInfo> info = tracker.getStageInfo(id);
            if (info.isDefined()) {
                SparkStageInfo s = info.get();
                pending += Math.max(0, s.numTasks() - s.numActiveTasks() - s.numCompletedTasks());
                running += s.numActiveTasks();
            }
        }
        return new int[] {pending, running};
    }

    /**
     * Whether an added executor waits: tasks wait, and no more of them than {@code waves} × the tasks running
     * (the executors working launch them all within about {@code waves} task times, sooner than a cold first
     * task ends, at ×2–4). With more waiting (one executor and 3 tasks behind it, run 100) a cold executor
     * still ends the stage sooner, and it starts at once.
     */
    public static boolean hold(int pending, int running, double waves) {
        return pending > 0 && pending <= waves * running;
    }

    static final class Driver implements DriverPlugin {
        private SparkContext sc;
        private double waves = 1.0;

        @Override
        public Map<String, String> init(SparkContext sc, PluginContext ctx) {
            this.sc = sc;
            this.waves = sc.conf().getDouble("spark.governor.launchHoldWaves", 1.0);
            return Collections.emptyMap();
        }

        /** {@code "may-launch <executor id> <ms held> [final]"} → "yes" or "no". */
        @Override
        public Object receive(Object message) {
            String[] parts = String.valueOf(message).split(" ");
            if (parts.length < 3 || !ASK.equals(parts[0])) {
                return "yes";
            }
            boolean last = parts.length > 3 && "final".equals(parts[3]);
            boolean wait;
            try {
                int[] counts = taskCounts(sc);
                wait = hold(counts[0], counts[1], waves);
            } catch (RuntimeException e) {
                wait = false;
            }
            if (wait && !last) {
                return "no";
            }
            LAUNCHED.put(parts[1], System.currentTimeMillis());
            try {
                HELD_MS.put(parts[1], Long.parseLong(parts[2]));
            } catch (NumberFormatException e) {
                HELD_MS.put(parts[1], -1L);
            }
            return "yes";
        }
    }

    static final class Executor implements ExecutorPlugin {
        @Override
        public void init(PluginContext ctx, Map<String, String> extraConf) {
            if ("driver".equals(ctx.executorID())) {
                return;  // local mode: the one executor is the driver, built before the driver plugin listens
            }
            long max = ctx.conf().getTimeAsMs("spark.governor.launchHoldMax", "10s");
            long poll = Math.max(10L, ctx.conf().getTimeAsMs("spark.governor.launchHoldPoll", "200ms"));
            long start = System.currentTimeMillis();
            while (true) {
                long held = System.currentTimeMillis() - start;
                boolean last = held >= max;
                Object answer;
                try {
                    answer = ctx.ask(ASK + " " + ctx.executorID() + " " + held + (last ? " final" : ""));
                } catch (Exception e) {
                    return;  // no driver plugin, a timeout: launch now
                }
                if (last || !"no".equals(answer)) {
                    return;
                }
                try {
                    Thread.sleep(Math.min(poll, Math.max(1L, max - held)));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        }
    }
}
