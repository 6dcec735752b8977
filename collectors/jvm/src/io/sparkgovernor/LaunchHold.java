package io.sparkgovernor;

import java.util.Collections;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

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
 * {@code spark.governor.launchHoldPoll} (200 ms), whether the running stages still have tasks not
 * launched ({@link StageTasks}, counted from the listener bus), no more of them than {@code spark.governor.launchHoldWaves} (1) × the tasks running
 * ({@link #hold}); it returns (the executor launches) once not, or after {@code
 * spark.governor.launchHoldMax} (10 s) in all. The old executors take the waiting tasks; the new one
 * launches idle and {@code collectors/executor_warmup.py} warms it ({@link #launchedAt} tells it when).
 * Any error lets the executor launch at once: the hold never stops an executor from working.
 *
 * <p>The same rule keeps a warmed executor's slot after its warm-up ({@link SlotHold}: the warm-up task asks
 * {@code "may-work <executor id> <stage id> <ms held> [final]"} through {@link #awaitSlot}). A warm-up that
 * ends while a batch's tasks wait for the old executors would otherwise hand its slot to one of them, and a
 * warmed executor's first task still runs ×1.6–1.8 (the calibrated simulator: the batch of a rate step
 * 11.3 s where the 2 old executors alone ran it in 7.6 s). The warm-up stages are left out of the count, and
 * so are the running tasks of executors a hold let go that have not finished a task of the job yet: their
 * first task is slow, and two warmed executors let go together would otherwise hold each other back.
 */
public final class LaunchHold implements SparkPlugin {
    /** Executor id → wall-clock ms the driver let it launch. */
    static final Map<String, Long> LAUNCHED = new ConcurrentHashMap<>();
    /** Executor id → ms it was held. */
    static final Map<String, Long> HELD_MS = new ConcurrentHashMap<>();
    static final String ASK = "may-launch";
    static final String ASK_SLOT = "may-work";
    /** Executor id → ms a warm-up task kept its slot ({@link SlotHold}). */
    static final Map<String, Long> SLOT_HELD_MS = new ConcurrentHashMap<>();
    /** Stages of warm-up tasks that asked to keep their slot: not counted as the job's. */
    static final Set<Integer> HOLD_STAGES = ConcurrentHashMap.newKeySet();
    /** The executor plugin's context, for {@link #awaitSlot} (null on the driver, or without the plugin). */
    static volatile PluginContext executorContext;

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

    /** Ms a warm-up task on executor {@code id} kept its slot, or -1. */
    public static long slotHeldMs(String id) {
        Long ms = SLOT_HELD_MS.get(id);
        return ms == null ? -1L : ms;
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

    /**
     * The executors a hold let go ({@link #LAUNCHED}, {@link #SLOT_HELD_MS}): until one has finished a task of
     * the job, its running task is not counted as one that frees a slot soon (its first task runs slowly).
     */
    static Set<String> released() {
        Set<String> out = new java.util.HashSet<>(LAUNCHED.keySet());
        out.addAll(SLOT_HELD_MS.keySet());
        return out;
    }

    /** How much slower a warmed executor's first task runs, for {@link #holdSlot} ({@code spark.governor.slotHoldFactor}). */
    static final double SLOT_FACTOR = 1.6;

    /**
     * Whether a warmed executor keeps its slot ({@link SlotHold}): {@link #hold}'s rule, and the old executors
     * launch the last waiting task sooner than the warmed one would end it later: it waits {@code waitMs} for
     * their slot, and its first task takes {@code factor} × a task's {@code taskMs} against their 1 ×, so it
     * is kept while {@code waitMs < (factor − 1) × taskMs}. A task's time unknown ({@code taskMs < 0}): the
     * rule alone.
     */
    public static boolean holdSlot(int pending, int running, double waves, long waitMs, long taskMs, double factor) {
        if (!hold(pending, running, waves)) {
            return false;
        }
        return taskMs < 0 || waitMs < (factor - 1.0) * taskMs;
    }

    static final class Driver implements DriverPlugin {
        private final StageTasks tasks = new StageTasks(HOLD_STAGES);
        private double waves = 1.0;
        private double slotFactor = SLOT_FACTOR;

        @Override
        public Map<String, String> init(SparkContext sc, PluginContext ctx) {
            this.waves = sc.conf().getDouble("spark.governor.launchHoldWaves", 1.0);
            this.slotFactor = sc.conf().getDouble("spark.governor.slotHoldFactor", SLOT_FACTOR);
            sc.addSparkListener(tasks);
            return Collections.emptyMap();
        }

        /**
         * {@code "may-launch <executor id> <ms held> [final]"} or {@code "may-work <executor id> <stage id> <ms
         * held> [final]"} → "yes" or "no".
         */
        @Override
        public Object receive(Object message) {
            String[] parts = String.valueOf(message).split(" ");
            if (parts.length >= 4 && ASK_SLOT.equals(parts[0])) {
                return mayWork(parts);
            }
            if (parts.length < 3 || !ASK.equals(parts[0])) {
                return "yes";
            }
            boolean last = parts.length > 3 && "final".equals(parts[3]);
            boolean wait;
            try {
                int[] counts = tasks.counts(released());
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

        private Object mayWork(String[] parts) {
            boolean last = parts.length > 4 && "final".equals(parts[4]);
            boolean wait;
            try {
                HOLD_STAGES.add(Integer.parseInt(parts[2]));
                Set<String> fresh = released();
                int[] counts = tasks.counts(fresh);
                long[] slot = counts[0] > 0 ? tasks.slotWait(fresh, counts[0], System.currentTimeMillis()) : null;
                wait = holdSlot(counts[0], counts[1], waves, slot == null ? -1L : slot[0], slot == null ? -1L : slot[1],
                                slotFactor);
            } catch (RuntimeException e) {
                wait = false;
            }
            if (wait && !last) {
                return "no";
            }
            try {
                SLOT_HELD_MS.put(parts[1], Long.parseLong(parts[3]));
            } catch (NumberFormatException e) {
                SLOT_HELD_MS.put(parts[1], -1L);
            }
            return "yes";
        }
    }

    /**
     * On an executor, in a warm-up task of stage {@code stageId}: wait while the driver's rule ({@link #hold})
     * says the job's waiting tasks are the old executors' to take, asking every {@code
     * spark.governor.launchHoldPoll} and at most {@code spark.governor.launchHoldMax} in all. Returns the ms
     * waited; 0 at once without the plugin, in local mode or on any error.
     */
    public static long awaitSlot(int stageId) {
        PluginContext ctx = executorContext;
        return ctx == null ? 0L : askWhileHeld(ctx, ASK_SLOT + " " + ctx.executorID() + " " + stageId);
    }

    /**
     * Ask the driver {@code "<question> <ms held> [final]"} every {@code spark.governor.launchHoldPoll} while it
     * answers "no", at most {@code spark.governor.launchHoldMax} in all (the last ask says "final"); returns
     * the ms waited. An error (no driver plugin, a timeout) or an interrupt ends the wait at once.
     */
    static long askWhileHeld(PluginContext ctx, String question) {
        long max = ctx.conf().getTimeAsMs("spark.governor.launchHoldMax", "10s");
        long poll = Math.max(10L, ctx.conf().getTimeAsMs("spark.governor.launchHoldPoll", "200ms"));
        long start = System.currentTimeMillis();
        while (true) {
            long held = System.currentTimeMillis() - start;
            boolean last = held >= max;
            Object answer;
            try {
                answer = ctx.ask(question + " " + held + (last ? " final" : ""));
            } catch (Exception e) {
                return held;
            }
            if (last || !"no".equals(answer)) {
                return held;
            }
            try {
                Thread.sleep(Math.min(poll, Math.max(1L, max - held)));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return System.currentTimeMillis() - start;
            }
        }
    }

    static final class Executor implements ExecutorPlugin {
        @Override
        public void init(PluginContext ctx, Map<String, String> extraConf) {
            if ("driver".equals(ctx.executorID())) {
                return;  // local mode: the one executor is the driver, built before the driver plugin listens
            }
            executorContext = ctx;
            askWhileHeld(ctx, ASK + " " + ctx.executorID());  // launches when it returns
        }
    }
}
