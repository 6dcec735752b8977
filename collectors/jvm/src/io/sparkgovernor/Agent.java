package io.sparkgovernor;

import java.io.ByteArrayOutputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import java.util.zip.GZIPOutputStream;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkContext$;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.sql.execution.streaming.runtime.StreamExecution;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.StreamingQueryProgress;
import org.apache.spark.sql.streaming.StreamingQueryStatus;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Option;

/**
 * The JVM reporter: one per driver JVM, shared by the SparkListener and every session's
 * StreamingQueryListener. The same protocol and rules as the Python reporter
 * ({@code collectors/reporter.py}):
 *
 * <ul>
 *   <li>{@link #offer} never blocks and never throws: it appends the event reference to a bounded
 *       queue; when full the oldest item is dropped and counted ({@code dropped_total}).</li>
 *   <li>One daemon thread turns events into wire records and POSTs gzip JSON reports
 *       ({@code policies/wire.py Report}, schema version {@value #SCHEMA_VERSION}) to
 *       {@code {endpoint}/api/v1/reports} every {@code spark.governor.interval}; a heartbeat
 *       report goes out every {@code spark.governor.heartbeat} so directives arrive on an idle job.</li>
 *   <li>Each POST has a total deadline ({@code spark.governor.postTimeout}); a failed report
 *       (connection refused, timeout, 5xx) is retried unchanged (same seq: idempotent ingest) at most
 *       {@code spark.governor.maxRetries} times with exponential backoff, then dropped and its records
 *       counted in {@code dropped_total}. A report refused with 4xx is discarded and counted.</li>
 *   <li>Finished tasks are folded here ({@link TaskFold}, report schema v3) into windows of the control plane's
 *       length ({@code spark.governor.windowMs}, else the {@code window_ms} of its first answer: tasks wait for
 *       it); task rows travel as {@code spark.governor.taskDetail} says (none, failed, all), plus the cluster
 *       profile's warm-up rows and sample.</li>
 *   <li>Each report also carries the state of every streaming query between its micro-batches
 *       ({@link QueryStates}: running batch and its age, trigger interval, liveness, source offsets and backlog;
 *       report schema v2), at least every {@code spark.governor.stateInterval} while a query is known.</li>
 *   <li>Directives come back on the response; the executor count is applied here (SparkContext
 *       developer API), every other knob is acknowledged as not supported by a jar-only attachment.</li>
 * </ul>
 */
final class Agent {
    static final int SCHEMA_VERSION = 3;
    static final List<String> KNOBS = Arrays.asList("executors", "batch_interval", "partition_plan", "exchanges");
    static final Map<String, String> UNSUPPORTED = new LinkedHashMap<>();

    static {
        UNSUPPORTED.put("batch_interval", "not supported by a jar-only attachment: the batch interval is cut by "
                + "spark-governor's paced sources or a supervised restart; attach() from the job's code");
        UNSUPPORTED.put("partition_plan", "not supported by a jar-only attachment: partition plans and routing "
                + "tables are applied by the job's foreachBatch; attach() from the job's code");
        UNSUPPORTED.put("exchanges", "not supported by a jar-only attachment: optional exchanges are declared by "
                + "the job's code; attach() from the job's code");
    }

    private static final Logger LOG = LoggerFactory.getLogger("spark_governor.jar");
    private static final Pattern JOB_NAME = Pattern.compile("^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$");
    private static Agent current;
    private static String disabledReason;

    // -- configuration ---------------------------------------------------------------------------
    final String job;
    final String endpoint;
    private final URI uri;
    private final String token;
    private final long intervalMs;
    private final long heartbeatMs;
    private final long stateIntervalMs;
    private final long postTimeoutMs;
    private final long stopTimeoutMs;
    private final int maxRetries;
    private final int maxBatch;
    private final int maxQueue;
    private final boolean applyExecutors;
    private final int taskCpus;
    final String version;
    private final TaskFold fold;
    private volatile Long windowMs;  // the control plane's statistics window (ms); null until known

    // -- state -----------------------------------------------------------------------------------
    final String id = UUID.randomUUID().toString().replace("-", "");
    private final ArrayBlockingQueue<Object> raw;
    private final ArrayDeque<Translator.Record> outbox = new ArrayDeque<>();
    private final Translator translator;
    private final ObjectMapper mapper = new ObjectMapper();
    final QueryStates queryStates = new QueryStates(mapper);
    private final Map<String, String> triggers = new LinkedHashMap<>();  // run id -> the trigger's toString
    private final HttpClient client;
    private final Semaphore wake = new Semaphore(0);
    private final Thread thread;
    private volatile boolean stopping;
    private volatile long finalDeadline;
    private long seq;
    private Pending pending;
    private int attempts;
    private List<Map<String, Object>> acks = new ArrayList<>();
    private final Map<String, Long> appliedVersions = new HashMap<>();
    private ExecutorApplier executors;
    private String appId;
    private String master;
    private boolean outage;

    final AtomicLong dropped = new AtomicLong();
    long sentRecords;
    long sentReports;
    long failedPosts;
    long droppedReports;
    long rejected;
    long conversionErrors;
    volatile String lastError;
    private volatile long finalCpuNs = -1;  // the reporter thread's CPU time, once it has ended

    private static final class Pending {
        final long seq;
        final byte[] body;
        final int records;
        final List<Map<String, Object>> acks;

        Pending(long seq, byte[] body, int records, List<Map<String, Object>> acks) {
            this.seq = seq;
            this.body = body;
            this.records = records;
            this.acks = acks;
        }
    }

    /**
     * The JVM's agent for ``conf`` (created by whichever listener comes first), or null when reporting is
     * disabled. Called by {@link Attach} after the version check.
     */
    static synchronized Agent get(SparkConf conf) {
        if (disabledReason != null) {
            return null;
        }
        if (current == null || current.stopping) {
            try {
                current = new Agent(conf);
                current.thread.start();
                LOG.info("spark-governor: reporting job '{}' to {} (listener jar {}, reporter {})", current.job,
                        current.endpoint, current.version, current.id);
            } catch (Exception e) {
                LOG.error("spark-governor: cannot start reporting, disabled for this application: {}", e.toString());
                disabledReason = e.toString();
                return null;
            }
        }
        return current;
    }

    long stopTimeoutMs() {
        return stopTimeoutMs;
    }

    static String jobName(SparkConf conf) {
        String explicit = conf.get("spark.governor.job", "");
        if (!explicit.isEmpty()) {
            if (!JOB_NAME.matcher(explicit).matches()) {
                throw new IllegalArgumentException("spark.governor.job: '" + explicit + "' is not a valid job name "
                        + "(letters, digits, '.', '_', '-'; starting with a letter or digit; at most 128)");
            }
            return explicit;
        }
        String name = conf.get("spark.app.name", "spark-job").replaceAll("[^A-Za-z0-9._-]+", "-")
                .replaceAll("^[^A-Za-z0-9]+", "");
        if (name.isEmpty()) {
            name = "spark-job";
        }
        return name.length() > 128 ? name.substring(0, 128) : name;
    }

    /**
     * The reporter token (a control-plane token with scope ``report``): spark.governor.token, else the file named
     * by spark.governor.tokenFile (a mounted Kubernetes Secret), else the driver's SPARK_GOVERNOR_TOKEN
     * environment variable; null when none is set. Spark redacts confs whose name contains "token".
     */
    static String token(SparkConf conf) {
        String t = conf.get("spark.governor.token", "").trim();
        String file = conf.get("spark.governor.tokenFile", "").trim();
        if (t.isEmpty() && !file.isEmpty()) {
            try {
                t = new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get(file)),
                        java.nio.charset.StandardCharsets.UTF_8).trim();
            } catch (java.io.IOException e) {
                throw new IllegalArgumentException("spark.governor.tokenFile: cannot read " + file + ": " + e);
            }
        }
        if (t.isEmpty() && System.getenv("SPARK_GOVERNOR_TOKEN") != null) {
            t = System.getenv("SPARK_GOVERNOR_TOKEN").trim();
        }
        return t.isEmpty() ? null : t;
    }

    private Agent(SparkConf conf) {
        job = jobName(conf);
        endpoint = conf.get("spark.governor.endpoint", "http://127.0.0.1:8787").replaceAll("/+$", "");
        uri = URI.create(endpoint + "/api/v1/reports");
        token = token(conf);
        intervalMs = Math.max(10, conf.getTimeAsMs("spark.governor.interval", "1s"));
        heartbeatMs = Math.max(intervalMs, conf.getTimeAsMs("spark.governor.heartbeat", "5s"));
        stateIntervalMs = Math.max(10, conf.getTimeAsMs("spark.governor.stateInterval", "1s"));
        long connectMs = Math.max(1, conf.getTimeAsMs("spark.governor.connectTimeout", "1s"));
        postTimeoutMs = Math.max(1, conf.getTimeAsMs("spark.governor.postTimeout", "5s"));
        stopTimeoutMs = Math.max(0, conf.getTimeAsMs("spark.governor.stopTimeout", "3s"));
        maxRetries = Math.max(0, conf.getInt("spark.governor.maxRetries", 3));
        maxBatch = Math.max(1, conf.getInt("spark.governor.maxBatch", 5000));
        maxQueue = Math.max(1, conf.getInt("spark.governor.maxQueue", 20000));
        applyExecutors = conf.getBoolean("spark.governor.applyExecutors", true);
        taskCpus = Math.max(1, conf.getInt("spark.task.cpus", 1));
        fold = new TaskFold(conf.get("spark.governor.taskDetail", "failed"));
        long window = conf.getLong("spark.governor.windowMs", 0);
        if (window != 0 && (window < 100 || window > 3_600_000)) {
            throw new IllegalArgumentException("spark.governor.windowMs: expected milliseconds in [100, 3600000] (got "
                    + window + ")");
        }
        windowMs = window == 0 ? null : window;
        version = VersionCheck.attribute("Implementation-Version", "unknown");
        raw = new ArrayBlockingQueue<>(maxQueue);
        translator = new Translator(null, taskCpus);
        client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofMillis(connectMs)).build();
        thread = new Thread(this::run, "spark-governor-reporter-" + job);
        thread.setDaemon(true);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> stop(Math.min(stopTimeoutMs, 2000)),
                "spark-governor-shutdown"));
    }

    // -- producer side (Spark's listener threads) ----------------------------------------------------
    /** A StreamingQueryListener event other than progress ("started", "idle", "terminated"), queued as is. */
    static final class QueryEvent {
        final String kind;
        final StreamingQueryListener.Event event;

        QueryEvent(String kind, StreamingQueryListener.Event event) {
            this.kind = kind;
            this.event = event;
        }

        String json() {
            if (event instanceof StreamingQueryListener.QueryStartedEvent) {
                return ((StreamingQueryListener.QueryStartedEvent) event).json();
            }
            if (event instanceof StreamingQueryListener.QueryIdleEvent) {
                return ((StreamingQueryListener.QueryIdleEvent) event).json();
            }
            return ((StreamingQueryListener.QueryTerminatedEvent) event).json();
        }
    }

    /** Queue a SparkListenerEvent, a StreamingQueryProgress or a {@link QueryEvent}; never blocks, never throws. */
    void offer(Object item) {
        try {
            while (!raw.offer(item)) {
                if (raw.poll() != null) {
                    dropped.incrementAndGet();
                }
            }
        } catch (Throwable ignored) {
            // never let anything escape into Spark
        }
    }

    /** Stop after one last conversion and send attempt, bounded by ``timeoutMs``. */
    void stop(long timeoutMs) {
        synchronized (Agent.class) {
            if (stopping) {
                return;
            }
            finalDeadline = System.currentTimeMillis() + timeoutMs;
            stopping = true;
        }
        wake.release();
        try {
            thread.join(timeoutMs + 500);  // a post still running past that ends on its own deadline (daemon thread)
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    Map<String, Object> stats() {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("queued", raw.size() + outbox.size());
        s.put("dropped", dropped.get());
        s.put("orphaned", translator.orphaned);
        s.put("sent_records", sentRecords);
        s.put("sent_reports", sentReports);
        s.put("failed_posts", failedPosts);
        s.put("dropped_reports", droppedReports);
        s.put("rejected", rejected);
        s.put("conversion_errors", conversionErrors);
        s.put("last_error", lastError);
        try {
            java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
            long ns = thread.isAlive() && mx.isThreadCpuTimeSupported() ? mx.getThreadCpuTime(thread.getId()) : finalCpuNs;
            s.put("thread_cpu_ms", ns < 0 ? null : ns / 1_000_000.0);
        } catch (Throwable t) {
            s.put("thread_cpu_ms", null);
        }
        return s;
    }

    /** The current agent's {@link #stats()} as JSON, or null when there is none (for benchmarks and debugging). */
    static synchronized String statsJson() {
        if (current == null) {
            return null;
        }
        try {
            Map<String, Object> s = current.stats();
            s.put("job", current.job);
            s.put("reporter_id", current.id);
            return current.mapper.writeValueAsString(s);
        } catch (Exception e) {
            return null;
        }
    }

    // -- background thread ------------------------------------------------------------------------
    private void run() {
        try {
            loop();
        } finally {
            try {
                finalCpuNs = java.lang.management.ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime();
            } catch (Throwable ignored) {
                finalCpuNs = -1;
            }
        }
    }

    private void loop() {
        long now = System.currentTimeMillis();
        long nextSend = now + intervalMs;
        long nextPoll = now;
        long lastAck = now;
        long backoff = Math.min(500, intervalMs);
        while (true) {
            try {
                if (stopping) {
                    finalFlush();
                    return;
                }
                drain(2000);
                now = System.currentTimeMillis();
                if (now >= nextPoll) {
                    poll(now);
                    nextPoll = now + stateIntervalMs;
                }
                if (now >= nextSend) {
                    boolean stateDue = queryStates.active() && now - lastAck >= stateIntervalMs;
                    if (pending != null || !outbox.isEmpty() || !acks.isEmpty() || now - lastAck >= heartbeatMs
                            || stateDue) {
                        if (sendOnce(postTimeoutMs)) {
                            lastAck = System.currentTimeMillis();
                            backoff = Math.min(500, intervalMs);
                            nextSend = outbox.size() >= maxBatch ? now : now + sendInterval();
                        } else {
                            nextSend = now + backoff;
                            backoff = Math.min(30_000, backoff * 2);
                        }
                    } else {
                        nextSend = now + sendInterval();
                    }
                }
                long wait = Math.max(1, Math.min(50, Math.min(nextSend, nextPoll) - System.currentTimeMillis()));
                if (wake.tryAcquire(wait, TimeUnit.MILLISECONDS)) {
                    wake.drainPermits();
                }
            } catch (InterruptedException e) {
                return;
            } catch (Throwable t) {  // a bug here must never kill reporting for good
                lastError = "reporter: " + t;
                try {
                    Thread.sleep(intervalMs);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }
    }

    /** Milliseconds between reports: the interval, at most the state interval while a query is known. */
    private long sendInterval() {
        return queryStates.active() ? Math.min(intervalMs, stateIntervalMs) : intervalMs;
    }

    /**
     * Poll every active streaming query of the application (status and trigger) into {@link #queryStates}: the
     * shared state's map of running queries, which holds every session's (a Spark Connect server's clients' too).
     */
    private void poll(long now) {
        List<QueryStates.Poll> polls = new ArrayList<>();
        try {
            Option<org.apache.spark.sql.classic.SparkSession> session =
                    org.apache.spark.sql.classic.SparkSession$.MODULE$.getDefaultSession();
            if (session == null || !session.isDefined()) {
                return;  // no session yet: the listener events tell the story
            }
            for (StreamExecution q : session.get().sharedState().activeStreamingQueries().values()) {
                String runId = q.runId().toString();
                String trigger = triggers.get(runId);
                if (trigger == null) {
                    trigger = String.valueOf(q.trigger());
                    if (triggers.size() >= 256) {
                        triggers.remove(triggers.keySet().iterator().next());
                    }
                    triggers.put(runId, trigger);
                }
                StreamingQueryStatus status = q.status();
                polls.add(new QueryStates.Poll(q.id().toString(), runId, q.name(), trigger, status.message(),
                        status.isDataAvailable(), status.isTriggerActive()));
            }
        } catch (Throwable t) {  // the session may be stopping; the events still tell the story
            lastError = "query status: " + t;
            return;
        }
        try {
            queryStates.onStatus(polls, now);
        } catch (Throwable t) {
            lastError = "query state: " + t;
        }
    }

    private void finalFlush() {
        boolean states = true;  // one last report of the queries' states (a query stopped with the application)
        while (System.currentTimeMillis() < finalDeadline) {
            while (!raw.isEmpty()) {
                drain(10_000);
            }
            if (pending == null && outbox.isEmpty() && acks.isEmpty() && !(states && queryStates.active())
                    && !fold.hasOpen()) {
                return;
            }
            states = false;
            long left = finalDeadline - System.currentTimeMillis();
            if (left <= 0 || !sendOnce(Math.min(postTimeoutMs, left))) {
                return;
            }
        }
    }

    private void drain(int limit) {
        List<Object> items = new ArrayList<>(Math.min(limit, raw.size()));
        raw.drainTo(items, limit);
        for (Object item : items) {
            List<Translator.Record> records;
            JsonNode progress = null;
            try {
                if (item instanceof SparkListenerEvent) {
                    records = translator.handle((SparkListenerEvent) item);
                } else if (item instanceof StreamingQueryProgress) {
                    progress = mapper.readTree(((StreamingQueryProgress) item).json());
                    records = Collections.singletonList(new Translator.Record("batch", Batches.record(progress, mapper)));
                } else if (item instanceof QueryEvent) {
                    records = Collections.emptyList();
                } else {
                    continue;
                }
            } catch (Throwable t) {  // a malformed event must not stop reporting
                conversionErrors++;
                lastError = "conversion: " + t;
                continue;
            }
            track(item, progress);
            for (Translator.Record r : records) {
                if (outbox.size() >= maxQueue) {
                    outbox.pollFirst();
                    dropped.incrementAndGet();
                }
                outbox.addLast(r);
            }
        }
    }

    /** Feed the query tracker; its failure never costs the event's own records. */
    private void track(Object item, JsonNode progress) {
        try {
            if (item instanceof SparkListenerJobStart) {
                SparkListenerJobStart start = (SparkListenerJobStart) item;
                java.util.Properties props = start.properties();
                if (props != null) {
                    queryStates.onJobStart(props.getProperty(QueryStates.QUERY_ID),
                            props.getProperty(QueryStates.BATCH_ID), start.time());
                }
            } else if (progress != null) {
                queryStates.onProgress(progress);
            } else if (item instanceof QueryEvent) {
                QueryEvent e = (QueryEvent) item;
                queryStates.onQueryEvent(e.kind, mapper.readTree(e.json()), System.currentTimeMillis());
            }
        } catch (Throwable t) {
            lastError = "query state: " + t;
        }
    }

    private SparkContext activeContext() {
        try {
            Option<SparkContext> sc = SparkContext$.MODULE$.getActive();
            return sc.isDefined() ? sc.get() : null;
        } catch (Throwable t) {
            return null;
        }
    }

    private void buildPending() throws Exception {
        int n = Math.min(maxBatch, outbox.size());
        List<Map<String, Object>> stages = new ArrayList<>();
        List<Map<String, Object>> tasks = new ArrayList<>();
        List<Object> batches = new ArrayList<>();
        List<Object> executorEvents = new ArrayList<>();
        List<Translator.Record> held = new ArrayList<>();  // tasks and stages wait for the window length
        Long window = windowMs;
        for (int i = 0; i < n; i++) {
            Translator.Record r = outbox.pollFirst();
            if (window == null && ("stage".equals(r.kind) || "task".equals(r.kind))) {
                held.add(r);
            } else if ("stage".equals(r.kind)) {
                stages.add(r.body);
            } else if ("task".equals(r.kind)) {
                tasks.add(r.body);
            } else {
                ("executor".equals(r.kind) ? executorEvents : batches).add(r.body);
            }
        }
        for (int i = held.size() - 1; i >= 0; i--) {
            outbox.addFirst(held.get(i));
        }
        Map<String, List<Object>> folded = null;
        if (window != null) {
            folded = fold.fold(tasks, stages, window, System.currentTimeMillis(), stopping);
            executorEvents.addAll(folded.get("executors"));
        }
        TreeSet<String> keys = new TreeSet<>();
        for (Object rec : stages) {
            keys.add((String) ((Map<?, ?>) rec).get("template_key"));
        }
        if (folded != null) {
            for (String part : new String[] {"tasks", "runtime_windows", "template_windows"}) {
                for (Object rec : folded.get(part)) {
                    keys.add((String) ((Map<?, ?>) rec).get("template_key"));
                }
            }
        }
        List<Object> templates = new ArrayList<>();
        for (String key : keys) {
            Templates.Template t = translator.knownTemplates.get(key);
            if (t != null) {
                templates.add(t.toRecord());
            }
        }
        seq++;
        Integer executorCount = null;
        SparkContext sc = activeContext();
        if (sc != null) {
            try {
                if (appId == null) {
                    appId = sc.applicationId();
                    master = sc.master();
                }
                if (executors == null) {
                    executors = new ExecutorApplier(sc);
                }
                executorCount = executors.executorIds().size();
                translator.liveSlots = liveSlots(sc.defaultParallelism(), executorCount,
                        sc.getConf().get("spark.executor.cores", null), taskCpus, sc.master());
            } catch (Throwable t) {  // the context may be stopping
                executorCount = null;
            }
        }
        Map<String, Object> notActuatable = new LinkedHashMap<>();
        List<String> canApply = new ArrayList<>();
        if (applyExecutors) {
            canApply.add("executors");
            String reason = executors == null ? null : executors.notActuatable();
            if (reason != null) {
                notActuatable.put("executors", reason);
            }
        } else {
            notActuatable.put("executors", "disabled by spark.governor.applyExecutors=false");
        }
        notActuatable.putAll(UNSUPPORTED);
        if (applyExecutors && executors != null) {
            try {
                executors.reconcile();  // converge towards an applied target (idle kills)
            } catch (Throwable t) {
                lastError = "reconcile: " + t;
            }
        }
        List<Map<String, Object>> sentAcks = acks;
        acks = new ArrayList<>();
        Map<String, Object> attachment = new LinkedHashMap<>();
        attachment.put("kind", "jar");
        attachment.put("version", version);
        attachment.put("can_apply", canApply);
        Map<String, Object> reporter = new LinkedHashMap<>();
        reporter.put("id", id);
        reporter.put("seq", seq);
        reporter.put("dropped_total", dropped.get());
        reporter.put("orphaned_total", translator.orphaned);
        reporter.put("app_id", appId);
        reporter.put("master", master);
        reporter.put("slots", translator.slots());
        reporter.put("executors", executorCount);
        reporter.put("not_actuatable", notActuatable);
        reporter.put("applied", sentAcks);
        reporter.put("knob_state", new LinkedHashMap<>());
        reporter.put("attachment", attachment);
        reporter.put("task_detail", fold.taskDetail);
        Map<String, Object> report = new LinkedHashMap<>();
        report.put("schema_version", SCHEMA_VERSION);
        report.put("job", job);
        report.put("reporter", reporter);
        report.put("templates", templates);
        report.put("stages", stages);
        report.put("tasks", folded == null ? new ArrayList<>() : folded.get("tasks"));
        report.put("batches", batches);
        report.put("executors", executorEvents);
        if (folded != null) {
            report.put("window_ms", window);
            report.put("runtime_windows", folded.get("runtime_windows"));
            report.put("template_windows", folded.get("template_windows"));
            report.put("task_spans", folded.get("task_spans"));
        }
        List<Map<String, Object>> states = queryStates.snapshot(System.currentTimeMillis());
        if (!states.isEmpty()) {
            report.put("queries", states);
        }
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        try (GZIPOutputStream gz = new GZIPOutputStream(buf)) {
            mapper.writeValue(gz, report);
        }
        pending = new Pending(seq, buf.toByteArray(), n - held.size(), sentAcks);
    }

    /** One POST of the pending report (built if needed) within ``deadlineMs``; false when it failed. */
    private boolean sendOnce(long deadlineMs) {
        try {
            if (pending == null) {
                buildPending();
            }
        } catch (Throwable t) {
            conversionErrors++;
            lastError = "report: " + t;
            return false;
        }
        HttpRequest.Builder req = HttpRequest.newBuilder(uri).timeout(Duration.ofMillis(Math.max(1, deadlineMs)))
                .header("Content-Type", "application/json").header("Content-Encoding", "gzip")
                .POST(HttpRequest.BodyPublishers.ofByteArray(pending.body));
        if (token != null) {
            req.header("Authorization", "Bearer " + token);
        }
        HttpResponse<byte[]> resp;
        CompletableFuture<HttpResponse<byte[]>> future = null;
        try {
            future = client.sendAsync(req.build(), HttpResponse.BodyHandlers.ofByteArray());
            resp = future.get(Math.max(1, deadlineMs), TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            future.cancel(true);
            return failed("post: no answer within " + deadlineMs + " ms");
        } catch (ExecutionException e) {
            return failed("post: " + (e.getCause() == null ? e : e.getCause()).getClass().getSimpleName());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return failed("post: interrupted");
        } catch (Throwable t) {
            return failed("post: " + t);
        }
        if (resp.statusCode() >= 500) {
            return failed("post: HTTP " + resp.statusCode());
        }
        Pending done = pending;
        pending = null;
        attempts = 0;
        if (outage) {
            outage = false;
            LOG.info("spark-governor: control plane at {} reachable again", endpoint);
        }
        String text = new String(resp.body(), java.nio.charset.StandardCharsets.UTF_8);
        learnWindow(text);
        if (resp.statusCode() >= 400) {
            rejected++;
            lastError = "rejected: HTTP " + resp.statusCode() + " " + (text.length() > 300 ? text.substring(0, 300) : text);
            if (rejected <= 5 || rejected % 100 == 0) {
                LOG.warn("spark-governor rejected a report ({} so far): {}", rejected, lastError);
            }
            return true;
        }
        sentRecords += done.records;
        sentReports++;
        try {
            JsonNode body = mapper.readTree(text);
            JsonNode directives = body == null ? null : body.get("directives");
            if (directives != null && directives.isArray()) {
                apply(directives);
            }
        } catch (Exception e) {
            lastError = "directives: " + e;
        }
        return true;
    }

    /** The control plane's window length from an answer ({@code window_ms}; also in the 400 refusing another). */
    private void learnWindow(String text) {
        try {
            JsonNode body = mapper.readTree(text);
            JsonNode w = body == null ? null : body.get("window_ms");
            if (w != null && w.canConvertToLong() && w.asLong() >= 100 && w.asLong() <= 3_600_000) {
                windowMs = w.asLong();
            }
        } catch (Exception ignored) {
            // not JSON: nothing to learn
        }
    }

    private boolean failed(String why) {
        failedPosts++;
        lastError = why;
        attempts++;
        if (!outage) {
            outage = true;
            LOG.warn("spark-governor: cannot report to {} ({}); retrying a report at most {} times, then dropping it",
                    endpoint, why, maxRetries);
        }
        if (attempts > maxRetries && pending != null) {
            dropped.addAndGet(pending.records);
            droppedReports++;
            List<Map<String, Object>> keep = new ArrayList<>(pending.acks);
            keep.addAll(acks);
            acks = keep;  // acknowledgements travel in the next report
            pending = null;
            attempts = 0;
        }
        return false;
    }

    /** Apply each directive whose version is newer than the one applied; queue the acks. */
    private void apply(JsonNode directives) {
        for (JsonNode d : directives) {
            JsonNode k = d.get("knob");
            JsonNode v = d.get("version");
            if (k == null || !k.isTextual() || v == null || !v.canConvertToLong()) {
                continue;
            }
            String knob = k.asText();
            long version = v.asLong();
            if (version <= appliedVersions.getOrDefault(knob, 0L)) {
                continue;
            }
            String[] result;
            JsonNode value = d.get("value");
            if ("executors".equals(knob) && applyExecutors) {
                SparkContext sc = activeContext();
                if (sc == null) {
                    continue;  // not yet (or no longer) a context to apply it to: try on the next answer
                }
                if (executors == null) {
                    executors = new ExecutorApplier(sc);
                }
                Object val = value == null || value.isNull() ? null
                        : value.isNumber() ? (Object) value.numberValue() : value.asText();
                result = executors.apply(val);
            } else if ("executors".equals(knob)) {
                result = new String[] {"not_actuatable", "not actuatable: disabled by spark.governor.applyExecutors=false"};
            } else {
                String reason = UNSUPPORTED.getOrDefault(knob, "not supported by a jar-only attachment");
                result = new String[] {"not_actuatable", "not actuatable: " + reason};
            }
            appliedVersions.put(knob, version);
            Map<String, Object> ack = new LinkedHashMap<>();
            ack.put("knob", knob);
            ack.put("version", version);
            ack.put("status", result[0]);
            ack.put("message", result[1] == null ? null : Translator.truncate(result[1], 2048));
            acks.add(ack);
            if (!"not_actuatable".equals(result[0])) {
                LOG.info("spark-governor: directive {} v{} = {}: {} ({})", knob, version, value, result[0], result[1]);
            }
            wake.release();
        }
    }

    /** Task slots of the application now: on a cluster with spark.executor.cores set, executors x cores /
     *  spark.task.cpus; else defaultParallelism / spark.task.cpus, which a cluster backend reports as
     *  max(total cores, 2) (one 1-core executor read as 2 slots). As collectors.attach.live_slots. */
    static int liveSlots(int defaultParallelism, int executors, String executorCores, int taskCpus, String master) {
        int cpus = Math.max(1, taskCpus);
        if (executorCores != null && (master == null || !master.startsWith("local"))) {
            try {
                return executors * Integer.parseInt(executorCores.trim()) / cpus;
            } catch (NumberFormatException e) {
                // fall back to the default parallelism
            }
        }
        return defaultParallelism / cpus;
    }
}
