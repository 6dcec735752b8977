package io.sparkgovernor;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.SparkListenerTaskStart;

/**
 * The tasks of the running stages, waiting and running, counted from the listener bus's events as they come
 * ({@link LaunchHold}'s rule reads them). Spark's status tracker reads its status store, which a live app
 * writes a stage to at most every {@code spark.ui.liveUpdate.period} (100 ms) and only on the stage's next
 * event: a stage whose tasks all started together read 0 running until a task ended, seconds later.
 *
 * <p>It also knows which executors have finished a task of a stage not excluded (a job's task, not a
 * warm-up's): {@link #counts} leaves out the running tasks of new executors that have not, whose first task
 * runs slowly and frees its slot late.
 */
public final class StageTasks extends SparkListener {
    private static final class Stage {
        final int tasks;
        final Map<String, Integer> runningOn = new HashMap<>();
        /** Task id → {launch ms} of the running tasks, and their executors. */
        final Map<Long, Long> launched = new HashMap<>();
        final Map<Long, String> launchedOn = new HashMap<>();
        final Set<Integer> done = new HashSet<>();
        long doneMs;
        int doneCount;

        Stage(int tasks) {
            this.tasks = tasks;
        }

        int running() {
            int n = 0;
            for (int r : runningOn.values()) {
                n += r;
            }
            return n;
        }
    }

    private final Map<Integer, Stage> stages = new ConcurrentHashMap<>();
    private final Set<Integer> excluded;
    private final Set<String> worked = ConcurrentHashMap.newKeySet();
    /** Mean ms of the successful tasks of the latest completed stage not excluded; -1 before one. */
    private volatile long lastTaskMs = -1L;

    /** {@code excluded}: stages (a live set) whose tasks are not the job's: not counted, and no sign of work. */
    public StageTasks(Set<Integer> excluded) {
        this.excluded = excluded;
    }

    @Override
    public void onStageSubmitted(SparkListenerStageSubmitted event) {
        stages.put(event.stageInfo().stageId(), new Stage(event.stageInfo().numTasks()));
    }

    @Override
    public void onStageCompleted(SparkListenerStageCompleted event) {
        Stage s = stages.remove(event.stageInfo().stageId());
        if (s != null && s.doneCount > 0 && !excluded.contains(event.stageInfo().stageId())) {
            lastTaskMs = s.doneMs / s.doneCount;
        }
    }

    @Override
    public void onTaskStart(SparkListenerTaskStart event) {
        Stage s = stages.get(event.stageId());
        if (s != null && event.taskInfo() != null) {
            synchronized (s) {
                s.runningOn.merge(event.taskInfo().executorId(), 1, Integer::sum);
                s.launched.put(event.taskInfo().taskId(), event.taskInfo().launchTime());
                s.launchedOn.put(event.taskInfo().taskId(), event.taskInfo().executorId());
            }
        }
    }

    @Override
    public void onTaskEnd(SparkListenerTaskEnd event) {
        if (event.taskInfo() == null) {
            return;
        }
        String executor = event.taskInfo().executorId();
        if (!excluded.contains(event.stageId())) {
            worked.add(executor);
        }
        Stage s = stages.get(event.stageId());
        if (s != null) {
            synchronized (s) {
                s.runningOn.computeIfPresent(executor, (k, n) -> n > 1 ? n - 1 : null);
                s.launched.remove(event.taskInfo().taskId());
                s.launchedOn.remove(event.taskInfo().taskId());
                if (event.taskInfo().successful()) {
                    s.done.add(event.taskInfo().index());
                    s.doneMs += event.taskInfo().duration();
                    s.doneCount++;
                }
            }
        }
    }

    /**
     * {ms until the {@code pending}-th running task counted by {@link #counts} ends, a task's ms} at {@code
     * nowMs}: each running task is taken to last as long as its stage's finished tasks did on average (the
     * latest completed stage's before one has finished), and to end no sooner than now. Null when no task
     * time is known yet or fewer tasks run.
     */
    public long[] slotWait(Set<String> fresh, int pending, long nowMs) {
        java.util.List<Long> left = new java.util.ArrayList<>();
        long sumMs = 0L;
        int n = 0;
        for (Map.Entry<Integer, Stage> e : stages.entrySet()) {
            if (excluded.contains(e.getKey())) {
                continue;
            }
            Stage s = e.getValue();
            synchronized (s) {
                long taskMs = s.doneCount > 0 ? s.doneMs / s.doneCount : lastTaskMs;
                if (taskMs < 0) {
                    continue;
                }
                for (Map.Entry<Long, Long> t : s.launched.entrySet()) {
                    String on = s.launchedOn.get(t.getKey());
                    if (fresh.contains(on) && !worked.contains(on)) {
                        continue;
                    }
                    left.add(Math.max(0L, t.getValue() + taskMs - nowMs));
                    sumMs += taskMs;
                    n++;
                }
            }
        }
        if (pending < 1 || n < pending) {
            return null;
        }
        java.util.Collections.sort(left);
        return new long[] {left.get(pending - 1), sumMs / n};
    }

    /** Whether {@code executor} has finished a task of a stage not excluded. */
    public boolean worked(String executor) {
        return worked.contains(executor);
    }

    /**
     * {tasks not launched yet, tasks running} over the running stages not excluded; the running tasks of the
     * executors in {@code fresh} that have not {@link #worked} are left out.
     */
    public int[] counts(Set<String> fresh) {
        int pending = 0;
        int running = 0;
        for (Map.Entry<Integer, Stage> e : stages.entrySet()) {
            if (excluded.contains(e.getKey())) {
                continue;
            }
            Stage s = e.getValue();
            synchronized (s) {
                int all = s.running();
                pending += Math.max(0, s.tasks - all - s.done.size());
                for (Map.Entry<String, Integer> on : s.runningOn.entrySet()) {
                    if (!fresh.contains(on.getKey()) || worked.contains(on.getKey())) {
                        running += on.getValue();
                    }
                }
            }
        }
        return new int[] {pending, running};
    }
}
