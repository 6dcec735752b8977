package io.sparkgovernor;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.TaskEndReason;
import org.apache.spark.executor.InputMetrics;
import org.apache.spark.executor.OutputMetrics;
import org.apache.spark.executor.ShuffleReadMetrics;
import org.apache.spark.executor.ShuffleWriteMetrics;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.apache.spark.storage.RDDInfo;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark listener events to wire records: a port of {@code collectors/events.py}
 * ({@code EventTranslator}) that reads the event objects instead of their JsonProtocol JSON.
 * Field for field the same records (names, units, defaults, clamping to non-negative), so the
 * control plane cannot tell the jar from the Python reporter. Only jobs of streaming queries
 * (job property {@code sql.streaming.queryId}) are tracked; a task whose stage was never seen
 * is counted as orphaned. Not thread-safe: only the reporter thread calls it.
 */
final class Translator {
    static final String QUERY_ID = "sql.streaming.queryId";
    static final String BATCH_ID = "streaming.sql.batchId";
    private static final int MAX_STAGES = 4096;

    /** One record: kind is "stage", "task" or "executor" (batches come from the query listener). */
    static final class Record {
        final String kind;
        final Map<String, Object> body;

        Record(String kind, Map<String, Object> body) {
            this.kind = kind;
            this.body = body;
        }
    }

    private static final class StageContext {
        final Templates.Template template;
        final String queryId;
        final Long batchId;
        int numTasks;
        Long submissionMs;

        StageContext(Templates.Template template, String queryId, Long batchId, int numTasks) {
            this.template = template;
            this.queryId = queryId;
            this.batchId = batchId;
            this.numTasks = numTasks;
        }
    }

    /** A map bounded to the most recently remembered MAX_STAGES entries (events.py _remember). */
    private static final class Recent<V> {
        private final LinkedHashMap<Integer, V> map = new LinkedHashMap<>();

        void remember(int key, V value) {
            map.remove(key);  // move to the end, as OrderedDict.move_to_end
            map.put(key, value);
            while (map.size() > MAX_STAGES) {
                map.remove(map.keySet().iterator().next());
            }
        }

        V get(int key) {
            return map.get(key);
        }

        boolean containsKey(int key) {
            return map.containsKey(key);
        }
    }

    final Templates templates = new Templates();
    final Map<String, Templates.Template> knownTemplates = new HashMap<>();
    private final Recent<StageContext> stages = new Recent<>();
    private final Recent<Boolean> ignoredStages = new Recent<>();
    private final Map<String, Integer> executorCores = new HashMap<>();
    private final Integer initialSlots;
    private final int taskCpus;
    long orphaned;
    Integer liveSlots;  // set by the reporter from the SparkContext

    Translator(Integer slots, int taskCpus) {
        this.initialSlots = slots;
        this.taskCpus = Math.max(1, taskCpus);
    }

    /** Concurrent task slots: total executor cores / spark.task.cpus (null if unknown). */
    Integer slots() {
        if (liveSlots != null) {
            return liveSlots;
        }
        if (!executorCores.isEmpty()) {
            int total = 0;
            for (int c : executorCores.values()) {
                total += c;
            }
            return total / taskCpus;
        }
        return initialSlots;
    }

    List<Record> handle(SparkListenerEvent ev) {
        if (ev instanceof SparkListenerTaskEnd) {
            return taskEnd((SparkListenerTaskEnd) ev);
        } else if (ev instanceof SparkListenerJobStart) {
            return jobStart((SparkListenerJobStart) ev);
        } else if (ev instanceof SparkListenerStageSubmitted) {
            return stageSubmitted(((SparkListenerStageSubmitted) ev).stageInfo());
        } else if (ev instanceof SparkListenerStageCompleted) {
            return stageCompleted(((SparkListenerStageCompleted) ev).stageInfo());
        } else if (ev instanceof SparkListenerExecutorAdded) {
            SparkListenerExecutorAdded e = (SparkListenerExecutorAdded) ev;
            String id = String.valueOf(e.executorId());
            int cores = Math.max(0, e.executorInfo().totalCores());
            executorCores.put(id, cores);
            if (!"driver".equals(id)) {  // its registration time, for the provisioning delay
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("executor_id", id);
                r.put("added_ms", e.time());
                r.put("cores", cores > 0 ? Integer.valueOf(cores) : null);
                return Collections.singletonList(new Record("executor", r));
            }
        } else if (ev instanceof SparkListenerExecutorRemoved) {
            SparkListenerExecutorRemoved e = (SparkListenerExecutorRemoved) ev;
            String id = String.valueOf(e.executorId());
            executorCores.remove(id);
            if (!"driver".equals(id)) {
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("executor_id", id);
                r.put("removed_ms", e.time());
                return Collections.singletonList(new Record("executor", r));
            }
        }
        return Collections.emptyList();
    }

    static long nonNeg(long x) {
        return Math.max(0L, x);
    }

    static Long optLong(Option<Object> o) {
        if (o == null || o.isEmpty()) {
            return null;
        }
        Object v = o.get();
        return v instanceof Number ? ((Number) v).longValue() : null;
    }

    static Templates.StageDesc describe(StageInfo info) {
        List<RDDInfo> rdds = new ArrayList<>(CollectionConverters.asJava(info.rddInfos()));
        rdds.sort((a, b) -> Integer.compare(a.id(), b.id()));
        List<String> ops = new ArrayList<>();
        for (RDDInfo rdd : rdds) {
            if (rdd.scope() == null || rdd.scope().isEmpty()) {
                continue;
            }
            String name = rdd.scope().get().name();
            if (name != null && !name.isEmpty() && !ops.contains(name)) {
                ops.add(name);
            }
        }
        List<Integer> parents = new ArrayList<>();
        for (Object p : CollectionConverters.asJava(info.parentIds())) {
            parents.add(((Number) p).intValue());
        }
        return new Templates.StageDesc(info.stageId(), info.name(), ops, parents, info.numTasks());
    }

    private List<Record> jobStart(SparkListenerJobStart ev) {
        Object q = ev.properties() == null ? null : ev.properties().get(QUERY_ID);
        String queryId = q instanceof String ? (String) q : null;
        List<StageInfo> infos = new ArrayList<>(CollectionConverters.asJava(ev.stageInfos()));
        if (queryId == null || queryId.isEmpty()) {
            for (StageInfo info : infos) {
                ignoredStages.remember(info.stageId(), Boolean.TRUE);
            }
            return Collections.emptyList();
        }
        Object b = ev.properties().get(BATCH_ID);
        Long batchId = null;
        if (b instanceof String && !((String) b).isEmpty() && ((String) b).chars().allMatch(Character::isDigit)) {
            try {
                batchId = Long.parseLong((String) b);
            } catch (NumberFormatException ignored) {
                batchId = null;
            }
        }
        List<Templates.StageDesc> descs = new ArrayList<>();
        Map<Integer, Templates.StageDesc> byId = new HashMap<>();
        for (StageInfo info : infos) {
            Templates.StageDesc d = describe(info);
            descs.add(d);
            byId.putIfAbsent(d.stageId, d);
        }
        Map<Integer, Templates.Template> found = templates.templatesForJob(queryId, batchId == null ? 0L : batchId, descs);
        for (Map.Entry<Integer, Templates.Template> e : found.entrySet()) {
            knownTemplates.put(e.getValue().key, e.getValue());
            stages.remember(e.getKey(), new StageContext(e.getValue(), queryId, batchId,
                    Math.max(0, byId.get(e.getKey()).numTasks)));
        }
        return Collections.emptyList();
    }

    private List<Record> stageSubmitted(StageInfo info) {
        StageContext ctx = stages.get(info.stageId());
        Long submission = optLong(info.submissionTime());
        if (ctx != null && submission != null && submission != 0L) {
            ctx.submissionMs = nonNeg(submission);
            ctx.numTasks = Math.max(0, info.numTasks());
        }
        return Collections.emptyList();
    }

    private List<Record> stageCompleted(StageInfo info) {
        StageContext ctx = stages.get(info.stageId());
        if (ctx == null) {
            return Collections.emptyList();
        }
        Long submission = optLong(info.submissionTime());
        if (submission == null || submission == 0L) {
            submission = ctx.submissionMs;
        }
        Long completion = optLong(info.completionTime());
        String failure = null;
        if (info.failureReason() != null && info.failureReason().isDefined()) {
            String f = info.failureReason().get();
            if (f != null && !f.isEmpty()) {
                failure = truncate(f, 4096);
            }
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("template_key", ctx.template.key);
        r.put("query_id", ctx.queryId);
        r.put("batch_id", ctx.batchId);
        r.put("stage_id", nonNeg(info.stageId()));
        r.put("attempt", nonNeg(info.attemptNumber()));
        r.put("num_tasks", nonNeg(info.numTasks()));
        r.put("submission_ms", submission != null && submission != 0L ? nonNeg(submission) : null);
        r.put("completion_ms", completion != null && completion != 0L ? nonNeg(completion) : null);
        r.put("failure_reason", failure);
        r.put("slots", slots());
        return Collections.singletonList(new Record("stage", r));
    }

    static String truncate(String s, int n) {
        return s.length() <= n ? s : s.substring(0, n);
    }

    /** events.py _failure_reason: "Kind: detail" or "Kind"; null for Success. */
    static String failureReason(TaskEndReason reason) {
        if (reason == null) {
            return null;
        }
        String kind = reason.getClass().getSimpleName().replace("$", "");
        if ("Success".equals(kind)) {
            return null;
        }
        String detail = null;
        if (reason instanceof org.apache.spark.ExceptionFailure) {
            org.apache.spark.ExceptionFailure ef = (org.apache.spark.ExceptionFailure) reason;
            detail = ef.description();
            if (detail == null || detail.isEmpty()) {
                detail = ef.className();
            }
        } else if (reason instanceof org.apache.spark.TaskKilled) {
            detail = ((org.apache.spark.TaskKilled) reason).reason();
        }
        return detail == null || detail.isEmpty() ? truncate(kind, 4096) : truncate(kind + ": " + detail, 4096);
    }

    private List<Record> taskEnd(SparkListenerTaskEnd ev) {
        int stageId = ev.stageId();
        StageContext ctx = stages.get(stageId);
        if (ctx == null) {
            if (!ignoredStages.containsKey(stageId)) {
                orphaned++;
            }
            return Collections.emptyList();
        }
        TaskInfo ti = ev.taskInfo();
        TaskMetrics tm = ev.taskMetrics();
        long launch = nonNeg(ti.launchTime());
        long finish = Math.max(launch, nonNeg(ti.finishTime()));
        Long submission = ctx.submissionMs != null && ctx.submissionMs <= launch ? ctx.submissionMs : null;
        String kind = ev.reason() == null ? "Success" : ev.reason().getClass().getSimpleName().replace("$", "");
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("template_key", ctx.template.key);
        r.put("query_id", ctx.queryId);
        r.put("batch_id", ctx.batchId);
        r.put("stage_id", nonNeg(stageId));
        r.put("stage_attempt", nonNeg(ev.stageAttemptId()));
        r.put("task_id", nonNeg(ti.taskId()));
        r.put("partition", nonNeg(ti.partitionId()));
        r.put("attempt", nonNeg(ti.attemptNumber()));
        String executor = ti.executorId() == null || ti.executorId().isEmpty() ? "unknown" : ti.executorId();
        r.put("executor_id", truncate(executor, 256));
        r.put("host", ti.host() == null || ti.host().isEmpty() ? null : truncate(ti.host(), 256));
        r.put("stage_submission_ms", submission);
        r.put("launch_ms", launch);
        r.put("finish_ms", finish);
        long run = 0, cpu = 0, gc = 0, deser = 0, ser = 0, inRec = 0, inBytes = 0, outRec = 0, outBytes = 0;
        long srRec = 0, srBytes = 0, srWait = 0, swRec = 0, swBytes = 0, swTime = 0;
        if (tm != null) {
            run = nonNeg(tm.executorRunTime());
            cpu = nonNeg(tm.executorCpuTime());
            gc = nonNeg(tm.jvmGCTime());
            deser = nonNeg(tm.executorDeserializeTime());
            ser = nonNeg(tm.resultSerializationTime());
            InputMetrics in = tm.inputMetrics();
            OutputMetrics out = tm.outputMetrics();
            ShuffleReadMetrics sr = tm.shuffleReadMetrics();
            ShuffleWriteMetrics sw = tm.shuffleWriteMetrics();
            inRec = nonNeg(in.recordsRead());
            inBytes = nonNeg(in.bytesRead());
            outRec = nonNeg(out.recordsWritten());
            outBytes = nonNeg(out.bytesWritten());
            srRec = nonNeg(sr.recordsRead());
            srBytes = nonNeg(sr.remoteBytesRead()) + nonNeg(sr.localBytesRead());
            srWait = nonNeg(sr.fetchWaitTime());
            swRec = nonNeg(sw.recordsWritten());
            swBytes = nonNeg(sw.bytesWritten());
            swTime = nonNeg(sw.writeTime());
        }
        r.put("run_time_ms", run);
        r.put("cpu_time_ns", cpu);
        r.put("gc_time_ms", gc);
        r.put("deserialize_ms", deser);
        r.put("result_serialize_ms", ser);
        r.put("input_records", inRec);
        r.put("input_bytes", inBytes);
        r.put("output_records", outRec);
        r.put("output_bytes", outBytes);
        r.put("shuffle_read_records", srRec);
        r.put("shuffle_read_bytes", srBytes);
        r.put("shuffle_fetch_wait_ms", srWait);
        r.put("shuffle_write_records", swRec);
        r.put("shuffle_write_bytes", swBytes);
        r.put("shuffle_write_time_ns", swTime);
        r.put("successful", "Success".equals(kind));
        r.put("speculative", ti.speculative());
        r.put("failure_reason", failureReason(ev.reason()));
        return Collections.singletonList(new Record("task", r));
    }
}
