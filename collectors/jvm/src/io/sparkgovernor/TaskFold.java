package io.sparkgovernor;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The edge fold of {@code policies/task_fold.py} (report schema v3, issue #42), ported: a reporter's state across
 * its reports (one application run) and {@link #fold}, which turns one report's finished tasks and completed
 * stages into template windows (the tasks of the report merged over partitions, the partitions so far and the
 * busiest one, the completed stages' launch interarrival and makespan), the runtime windows that ended
 * {@link #CLOSE_GRACE_MS} before now (or every open one when final), task spans, executors' first tasks and the
 * task rows that travel (warm-up, sample, failed or all). Records are the {@link Translator}'s maps; moments are in
 * seconds (count, mean, M2, min, max: Welford/Chan, thesis §4.4.1). The Python module is the reference: the
 * same events give the same records to 1e-9 ({@code tests/spark/test_listener_jar_local.py}).
 */
final class TaskFold {
    static final String[] RUNTIME_MOMENTS = {"latency", "service", "service_per_record", "interarrival"};
    static final String[] TEMPLATE_MOMENTS = {"launch_interarrival", "makespan"};
    static final String[] TASK_SUMS = {"run_time_ms", "cpu_time_ns", "gc_time_ms", "input_records", "input_bytes",
        "output_records", "output_bytes", "shuffle_read_records", "shuffle_read_bytes", "shuffle_write_records",
        "shuffle_write_bytes", "shuffle_fetch_wait_ms"};
    static final String[] RUNTIME_SUMS = {"run_time_ms", "cpu_time_ns", "gc_time_ms", "input_records", "records_in",
        "input_bytes", "output_records", "output_bytes", "shuffle_read_records", "shuffle_read_bytes",
        "shuffle_write_records", "shuffle_write_bytes", "shuffle_fetch_wait_ms"};
    static final List<String> MODES = Arrays.asList("none", "failed", "all");
    static final int WARMUP_TASKS = 32;
    static final int SAMPLE_ONE_IN = 16;
    static final int MAX_OPEN_STAGES = 4096;
    static final long CLOSE_GRACE_MS = 1000;
    static final int REMEMBER_WINDOWS = 3;
    private static final long SAMPLE_BELOW = (1L << 32) / SAMPLE_ONE_IN;
    private static final long MAX = Long.MAX_VALUE;

    final String taskDetail;
    private final Map<List<Object>, Long> lastLaunch = new HashMap<>();
    private final LinkedHashMap<List<Object>, List<Long>> stageLaunches = new LinkedHashMap<>();
    private final Map<String, PriorityQueue<Long>> earliest = new HashMap<>();
    private final Map<String, Long[]> firsts = new HashMap<>();
    private final Map<List<Object>, Map<String, Object>> open = new HashMap<>();
    private final Map<List<Object>, Map<Long, Long>> runs = new HashMap<>();

    TaskFold(String taskDetail) {
        if (!MODES.contains(taskDetail)) {
            throw new IllegalArgumentException("spark.governor.taskDetail: expected none, failed or all (got '"
                    + taskDetail + "')");
        }
        this.taskDetail = taskDetail;
    }

    /** Whether a task is in the uniform sample (policies/task_fold.py sampled: Knuth's multiplicative hash). */
    static boolean sampled(long taskId) {
        return ((taskId * 0x9E3779B1L) & 0xFFFFFFFFL) < SAMPLE_BELOW;
    }

    boolean hasOpen() {
        return !open.isEmpty();
    }

    // -- moments ----------------------------------------------------------------------------------
    static Map<String, Object> moments(List<Double> values) {
        Map<String, Object> m = new LinkedHashMap<>();
        int n = values.size();
        if (n == 0) {
            m.put("n", 0L);
            m.put("mean", 0.0);
            m.put("m2", 0.0);
            m.put("min", null);
            m.put("max", null);
            return m;
        }
        double sum = 0.0;
        double comp = 0.0;  // Neumaier's compensated sum (Python: math.fsum)
        double lo = values.get(0);
        double hi = lo;
        for (double x : values) {
            double t = sum + x;
            comp += Math.abs(sum) >= Math.abs(x) ? (sum - t) + x : (x - t) + sum;
            sum = t;
            lo = Math.min(lo, x);
            hi = Math.max(hi, x);
        }
        double mean = n == 1 ? values.get(0) : (sum + comp) / n;
        double m2 = 0.0;
        if (n > 1) {
            for (double x : values) {
                m2 += (x - mean) * (x - mean);
            }
        }
        m.put("n", (long) n);
        m.put("mean", mean);
        m.put("m2", m2);
        m.put("min", lo);
        m.put("max", hi);
        return m;
    }

    static Map<String, Object> mergeMoments(Map<String, Object> a, Map<String, Object> b) {
        long na = num(a.get("n"));
        long nb = num(b.get("n"));
        if (nb == 0) {
            return a;
        }
        if (na == 0) {
            return b;
        }
        double ma = ((Number) a.get("mean")).doubleValue();
        double mb = ((Number) b.get("mean")).doubleValue();
        long n = na + nb;
        double delta = mb - ma;
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("n", n);
        m.put("mean", ma + delta * nb / n);
        m.put("m2", ((Number) a.get("m2")).doubleValue() + ((Number) b.get("m2")).doubleValue()
                + delta * delta * na * nb / n);
        m.put("min", extreme(a.get("min"), b.get("min"), true));
        m.put("max", extreme(a.get("max"), b.get("max"), false));
        return m;
    }

    private static Object extreme(Object a, Object b, boolean min) {
        if (a == null) {
            return b;
        }
        if (b == null) {
            return a;
        }
        double x = ((Number) a).doubleValue();
        double y = ((Number) b).doubleValue();
        return min ? Math.min(x, y) : Math.max(x, y);
    }

    private static long num(Object o) {
        return o == null ? 0L : ((Number) o).longValue();
    }

    // -- windows ----------------------------------------------------------------------------------
    private static final class Acc {
        long tasks;
        long failed;
        final long[] sums = new long[RUNTIME_SUMS.length];
        final List<List<Double>> samples = new ArrayList<>();

        Acc() {
            for (int i = 0; i < RUNTIME_MOMENTS.length; i++) {
                samples.add(new ArrayList<>());
            }
        }

        Map<String, Object> record() {
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("tasks", tasks);
            r.put("failed_tasks", failed);
            for (int i = 0; i < RUNTIME_SUMS.length; i++) {
                r.put(RUNTIME_SUMS[i], sums[i]);
            }
            for (int i = 0; i < RUNTIME_MOMENTS.length; i++) {
                r.put(RUNTIME_MOMENTS[i], moments(samples.get(i)));
            }
            return r;
        }
    }

    private static int sumIndex(String name) {
        return Arrays.asList(RUNTIME_SUMS).indexOf(name);
    }

    private static final int RECORDS_IN = sumIndex("records_in");

    /** The runtime windows of tasks sorted by launch: (template, partition, window start) → record. */
    private TreeMap<List<Object>, Map<String, Object>> foldTasks(List<Map<String, Object>> ordered, long windowMs) {
        Map<List<Object>, Acc> windows = new LinkedHashMap<>();
        for (Map<String, Object> t : ordered) {
            if (killed(t)) {
                continue;
            }
            List<Object> vertex = Arrays.asList(t.get("template_key"), num(t.get("partition")));
            long finish = num(t.get("finish_ms"));
            List<Object> key = Arrays.asList(vertex.get(0), vertex.get(1), finish - finish % windowMs);
            Acc w = windows.computeIfAbsent(key, k -> new Acc());
            if (!Boolean.TRUE.equals(t.get("successful"))) {
                w.failed++;
                continue;
            }
            w.tasks++;
            long recordsIn = satAdd(num(t.get("input_records")), num(t.get("shuffle_read_records")));
            w.sums[RECORDS_IN] = satAdd(w.sums[RECORDS_IN], recordsIn);
            for (String name : TASK_SUMS) {
                int k = sumIndex(name);
                w.sums[k] = satAdd(w.sums[k], num(t.get(name)));  // a BIGINT column holds at most 2^63 - 1
            }
            double runS = num(t.get("run_time_ms")) / 1000.0;
            w.samples.get(1).add(runS);
            Object submission = t.get("stage_submission_ms");
            if (submission != null) {
                w.samples.get(0).add((finish - num(submission)) / 1000.0);
            }
            if (recordsIn > 0) {
                w.samples.get(2).add(runS / recordsIn);
            }
            long launch = num(t.get("launch_ms"));
            Long last = lastLaunch.get(vertex);
            if (last != null && launch > last) {
                w.samples.get(3).add((launch - last) / 1000.0);
            }
            lastLaunch.put(vertex, last == null ? launch : Math.max(last, launch));
        }
        TreeMap<List<Object>, Map<String, Object>> out = new TreeMap<>(KEY_ORDER);
        for (Map.Entry<List<Object>, Acc> e : windows.entrySet()) {
            out.put(e.getKey(), e.getValue().record());
        }
        return out;
    }

    /** Tuple order of Python's sorted(): strings, then numbers, element by element. */
    static final Comparator<List<Object>> KEY_ORDER = (a, b) -> {
        for (int i = 0; i < Math.min(a.size(), b.size()); i++) {
            Object x = a.get(i);
            Object y = b.get(i);
            int c = x instanceof String ? ((String) x).compareTo((String) y)
                    : Long.compare(((Number) x).longValue(), ((Number) y).longValue());
            if (c != 0) {
                return c;
            }
        }
        return Integer.compare(a.size(), b.size());
    };

    static Map<String, Object> mergeRuntime(Map<String, Object> a, Map<String, Object> b) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("tasks", satAdd(num(a.get("tasks")), num(b.get("tasks"))));
        out.put("failed_tasks", satAdd(num(a.get("failed_tasks")), num(b.get("failed_tasks"))));
        for (String name : RUNTIME_SUMS) {
            out.put(name, satAdd(num(a.get(name)), num(b.get(name))));
        }
        for (String name : RUNTIME_MOMENTS) {
            out.put(name, mergeMoments(cast(a.get(name)), cast(b.get(name))));
        }
        return out;
    }

    private static long satAdd(long a, long b) {
        return b > MAX - a ? MAX : a + b;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> cast(Object o) {
        return (Map<String, Object>) o;
    }

    static Map<String, Object> emptyTasks() {
        Acc none = new Acc();
        return none.record();
    }

    static Map<String, Object> stageWindow(Map<String, Object> s, List<Long> launches) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("stages", 1L);
        r.put("max_num_tasks", num(s.get("num_tasks")));
        r.put("max_slots", s.get("slots") == null ? null : num(s.get("slots")));
        List<Double> gaps = new ArrayList<>();
        for (int i = 1; i < launches.size(); i++) {
            gaps.add((launches.get(i) - launches.get(i - 1)) / 1000.0);
        }
        r.put("launch_interarrival", moments(gaps));
        List<Double> makespan = new ArrayList<>();
        Object sub = s.get("submission_ms");
        long completion = num(s.get("completion_ms"));
        if (sub != null && completion >= num(sub)) {
            makespan.add((completion - num(sub)) / 1000.0);
        }
        r.put("makespan", moments(makespan));
        return r;
    }

    static Map<String, Object> templateWindow(Map<String, Object> tasks, Map<String, Object> stages, long partitions,
                                              long busiest) {
        Map<String, Object> r = new LinkedHashMap<>(tasks != null ? tasks : emptyTasks());
        if (stages != null) {
            r.putAll(stages);
        } else {
            r.put("stages", 0L);
            r.put("max_num_tasks", 0L);
            r.put("max_slots", null);
            for (String name : TEMPLATE_MOMENTS) {
                r.put(name, moments(new ArrayList<>()));
            }
        }
        r.put("partitions", partitions);
        r.put("max_vertex_run_time_ms", busiest);
        return r;
    }

    static Map<String, Object> mergeTemplate(Map<String, Object> a, Map<String, Object> b) {
        Map<String, Object> out = mergeRuntime(a, b);
        out.put("stages", num(a.get("stages")) + num(b.get("stages")));
        out.put("max_num_tasks", Math.max(num(a.get("max_num_tasks")), num(b.get("max_num_tasks"))));
        long slots = Math.max(num(a.get("max_slots")), num(b.get("max_slots")));
        out.put("max_slots", slots == 0 ? null : slots);
        out.put("partitions", Math.max(num(a.get("partitions")), num(b.get("partitions"))));
        out.put("max_vertex_run_time_ms", Math.max(num(a.get("max_vertex_run_time_ms")),
                num(b.get("max_vertex_run_time_ms"))));
        for (String name : TEMPLATE_MOMENTS) {
            out.put(name, mergeMoments(cast(a.get(name)), cast(b.get(name))));
        }
        return out;
    }

    // -- the reporter's state ----------------------------------------------------------------------
    private boolean warmup(Map<String, Object> t) {
        PriorityQueue<Long> heap = earliest.computeIfAbsent(String.valueOf(t.get("executor_id")),
                k -> new PriorityQueue<>(Comparator.reverseOrder()));
        long launch = num(t.get("launch_ms"));
        if (heap.size() < WARMUP_TASKS) {
            heap.add(launch);
            return true;
        }
        if (launch < heap.peek()) {
            heap.poll();
            heap.add(launch);
            return true;
        }
        return false;
    }

    /** policies/task_fold.py killed(): a task Spark killed (TaskKilled) counts in no window and never travels. */
    static boolean killed(Map<String, Object> t) {
        Object reason = t.get("failure_reason");
        return !Boolean.TRUE.equals(t.get("successful")) && reason instanceof String
                && ((String) reason).startsWith("TaskKilled");
    }

    private String detail(Map<String, Object> t) {
        if (killed(t)) {
            return null;
        }
        if (warmup(t)) {
            return "warmup";
        }
        if (sampled(num(t.get("task_id")))) {
            return "sample";
        }
        if ("all".equals(taskDetail)) {
            return "all";
        }
        if ("failed".equals(taskDetail) && !Boolean.TRUE.equals(t.get("successful"))) {
            return "failed";
        }
        return null;
    }

    /** One report's records (policies/task_fold.py TaskFold.fold): keys runtime_windows, template_windows,
     * task_spans, executors and tasks. */
    Map<String, List<Object>> fold(List<Map<String, Object>> tasks, List<Map<String, Object>> stages, long windowMs,
                                   long nowMs, boolean fin) {
        List<Map<String, Object>> ordered = new ArrayList<>(tasks);
        ordered.sort(Comparator.comparingLong(t -> num(t.get("launch_ms"))));
        TreeMap<List<Object>, Map<String, Object>> deltas = foldTasks(ordered, windowMs);
        List<Object> rows = new ArrayList<>();
        TreeMap<String, Long[]> changed = new TreeMap<>();
        TreeMap<List<Object>, long[]> spans = new TreeMap<>(KEY_ORDER);
        for (Map<String, Object> t : ordered) {
            List<Object> stage = Arrays.asList(num(t.get("stage_id")), num(t.get("stage_attempt")));
            List<Long> launches = stageLaunches.get(stage);
            if (launches == null) {
                launches = new ArrayList<>();
                stageLaunches.put(stage, launches);
                while (stageLaunches.size() > MAX_OPEN_STAGES) {
                    stageLaunches.remove(stageLaunches.keySet().iterator().next());
                }
            }
            long launch = num(t.get("launch_ms"));
            long finish = num(t.get("finish_ms"));
            launches.add(launch);
            String executor = String.valueOf(t.get("executor_id"));
            Long[] f = firsts.computeIfAbsent(executor, k -> new Long[] {null, null});
            boolean change = false;
            if (f[0] == null || launch < f[0]) {
                f[0] = launch;
                change = true;
            }
            if (Boolean.TRUE.equals(t.get("successful")) && (f[1] == null || finish < f[1])) {
                f[1] = finish;
                change = true;
            }
            if (change) {
                changed.put(executor, f);
            }
            String why = detail(t);
            if (why != null) {
                Map<String, Object> row = new LinkedHashMap<>(t);
                row.put("detail", why);
                rows.add(row);
            }
            if (t.get("query_id") != null && t.get("batch_id") != null) {
                List<Object> key = Arrays.asList(t.get("query_id"), num(t.get("batch_id")));
                long[] span = spans.get(key);
                if (span == null) {
                    spans.put(key, new long[] {launch, finish});
                } else {
                    span[0] = Math.min(span[0], launch);
                    span[1] = Math.max(span[1], finish);
                }
            }
        }
        TreeMap<List<Object>, Map<String, Object>> parts = new TreeMap<>(KEY_ORDER);
        for (Map.Entry<List<Object>, Map<String, Object>> e : deltas.entrySet()) {
            List<Object> k = e.getKey();
            Map<String, Object> w = e.getValue();
            open.merge(k, w, TaskFold::mergeRuntime);
            Map<Long, Long> r = runs.computeIfAbsent(Arrays.asList(k.get(0), k.get(2)), x -> new HashMap<>());
            r.merge(num(k.get(1)), num(w.get("run_time_ms")), Long::sum);
        }
        // the task parts merged over partitions in partition order (template, window, partition)
        List<List<Object>> byPartition = new ArrayList<>(deltas.keySet());
        byPartition.sort((a, b) -> KEY_ORDER.compare(Arrays.asList(a.get(0), a.get(2), a.get(1)),
                Arrays.asList(b.get(0), b.get(2), b.get(1))));
        for (List<Object> k : byPartition) {
            parts.merge(Arrays.asList(k.get(0), k.get(2)), deltas.get(k), TaskFold::mergeRuntime);
        }
        TreeMap<List<Object>, Map<String, Object>> stageParts = new TreeMap<>(KEY_ORDER);
        for (Map<String, Object> s : stages) {
            List<Long> launches = stageLaunches.remove(Arrays.asList(num(s.get("stage_id")), num(s.get("attempt"))));
            Object failure = s.get("failure_reason");
            if (s.get("completion_ms") == null || (failure != null && !String.valueOf(failure).isEmpty())) {
                continue;
            }
            List<Long> sorted = new ArrayList<>(launches == null ? new ArrayList<>() : launches);
            sorted.sort(null);
            Map<String, Object> rec = templateWindow(null, stageWindow(s, sorted), 0, 0);
            long completion = num(s.get("completion_ms"));
            stageParts.merge(Arrays.asList(s.get("template_key"), completion - completion % windowMs), rec,
                    TaskFold::mergeTemplate);
        }
        TreeSet<List<Object>> keys = new TreeSet<>(KEY_ORDER);
        keys.addAll(parts.keySet());
        keys.addAll(stageParts.keySet());
        List<Object> template = new ArrayList<>();
        for (List<Object> key : keys) {
            Map<Long, Long> r = runs.getOrDefault(key, new HashMap<>());
            long busiest = 0;
            for (long v : r.values()) {
                busiest = Math.max(busiest, v);
            }
            Map<String, Object> rec = templateWindow(parts.get(key), null, r.size(), busiest);
            if (stageParts.containsKey(key)) {
                rec = mergeTemplate(rec, stageParts.get(key));
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("template_key", key.get(0));
            out.put("window_start_ms", key.get(1));
            out.putAll(rec);
            template.add(out);
        }
        TreeSet<List<Object>> closed = new TreeSet<>(KEY_ORDER);
        for (List<Object> k : open.keySet()) {
            if (fin || num(k.get(2)) + windowMs + CLOSE_GRACE_MS <= nowMs) {
                closed.add(k);
            }
        }
        List<Object> runtime = new ArrayList<>();
        for (List<Object> k : closed) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("template_key", k.get(0));
            out.put("partition", k.get(1));
            out.put("window_start_ms", k.get(2));
            out.putAll(open.remove(k));
            runtime.add(out);
        }
        runs.keySet().removeIf(k -> num(k.get(1)) + windowMs * (1 + REMEMBER_WINDOWS) <= nowMs);
        List<Object> spanList = new ArrayList<>();
        for (Map.Entry<List<Object>, long[]> e : spans.entrySet()) {
            Map<String, Object> sp = new LinkedHashMap<>();
            sp.put("query_id", e.getKey().get(0));
            sp.put("batch_id", e.getKey().get(1));
            sp.put("first_launch_ms", e.getValue()[0]);
            sp.put("last_finish_ms", e.getValue()[1]);
            spanList.add(sp);
        }
        List<Object> executors = new ArrayList<>();
        for (Map.Entry<String, Long[]> e : changed.entrySet()) {
            Map<String, Object> ex = new LinkedHashMap<>();
            ex.put("executor_id", e.getKey());
            ex.put("first_launch_ms", e.getValue()[0]);
            ex.put("first_finish_ms", e.getValue()[1]);
            executors.add(ex);
        }
        Map<String, List<Object>> result = new LinkedHashMap<>();
        result.put("runtime_windows", runtime);
        result.put("template_windows", template);
        result.put("task_spans", spanList);
        result.put("executors", executors);
        result.put("tasks", rows);
        return result;
    }
}
