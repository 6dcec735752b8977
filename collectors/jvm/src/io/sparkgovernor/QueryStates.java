package io.sparkgovernor;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The state of each streaming query between its micro-batches (issue #14, "See the job between batches"),
 * as wire {@code QueryStateRecord}s ({@code policies/wire.py}, report schema v2): a port of
 * {@code QueryTracker} in {@code collectors/query_state.py}, record for record, without source probes (a probe is
 * the job's Python code; the jar reads offsets only).
 *
 * <ul>
 *   <li>the running batch: its id and start from the first Spark job of the batch (the job properties
 *       {@code sql.streaming.queryId} and {@code streaming.sql.batchId}), or from a status poll (trigger active,
 *       data available) before the batch starts a job;</li>
 *   <li>the latest completed batch (its progress), the processing-time trigger interval (poll);</li>
 *   <li>liveness: {@code onQueryIdle} and the poll's "no data", so an idle query is reported idle, not stuck;
 *       {@code onQueryTerminated}, or a polled query no longer listed, ends it;</li>
 *   <li>per source: the processed and latest offsets, and where offsets count rows (the project's sources'
 *       {@code {"rows": n, "t_ms": ...}}, Kafka's {@code {topic: {partition: offset}}}, plain numbers) the rows
 *       available now, the backlog and when its oldest row became available; Kafka's
 *       {@code *OffsetsBehindLatest} metrics as reported.</li>
 * </ul>
 *
 * <p>Times are epoch milliseconds (driver clock), rates rows per second. Not thread-safe: only the reporter
 * thread calls it.
 */
final class QueryStates {
    static final String QUERY_ID = "sql.streaming.queryId";
    static final String BATCH_ID = "streaming.sql.batchId";
    /** recent (offset time, rows) points kept per source for the arrival rate */
    static final int RATE_POINTS = 8;
    /** a terminated query is reported this many times more, then forgotten */
    static final int TERMINATED_REPORTS = 3;
    /** policies/wire.py MAX_QUERIES_PER_REPORT, MAX_SOURCES_PER_QUERY, MAX_OFFSET_CHARS */
    static final int MAX_QUERIES = 256;
    static final int MAX_SOURCES = 64;
    static final int MAX_OFFSET_CHARS = 2048;
    private static final Pattern TRIGGER = Pattern.compile("ProcessingTimeTrigger\\((\\d+)\\)");
    private static final String[] BEHIND = {"minOffsetsBehindLatest", "avgOffsetsBehindLatest",
        "maxOffsetsBehindLatest"};

    private final ObjectMapper mapper;
    final Map<String, Query> queries = new LinkedHashMap<>();

    QueryStates(ObjectMapper mapper) {
        this.mapper = mapper;
    }

    /** What a status poll says of one active query. */
    static final class Poll {
        final String id;
        final String runId;
        final String name;
        final String trigger;
        final String message;
        final boolean dataAvailable;
        final boolean triggerActive;

        Poll(String id, String runId, String name, String trigger, String message, boolean dataAvailable,
             boolean triggerActive) {
            this.id = id;
            this.runId = runId;
            this.name = name;
            this.trigger = trigger;
            this.message = message;
            this.dataAvailable = dataAvailable;
            this.triggerActive = triggerActive;
        }
    }

    static final class Source {
        String description;
        JsonNode processedOffset;
        JsonNode latestOffset;
        Long processedRows;
        Long latestRows;
        Long latestMs;
        final ArrayDeque<long[]> points = new ArrayDeque<>();  // (ms, rows) of latest offsets
        Double reportedRate;  // the progress' inputRowsPerSecond (fallback)
        final Map<String, JsonNode> metrics = new LinkedHashMap<>();

        /** Rows per second the source offered over its recent offsets (null when unknown). */
        Double arrivalRate() {
            if (points.size() >= 2) {
                long[] first = points.peekFirst();
                long[] last = points.peekLast();
                if (last[0] > first[0] && last[1] >= first[1]) {
                    return (last[1] - first[1]) * 1000.0 / (last[0] - first[0]);
                }
            }
            return reportedRate;
        }
    }

    static final class Query {
        final String queryId;
        String runId;
        String name;
        Long runningBatchId;
        Long runningStartMs;
        Long lastBatchId;
        Long lastTriggerMs;
        Long lastEndMs;
        Long triggerMs;  // the trigger interval
        Long lastIdleMs;
        Long noDataMs;  // a poll saw the last trigger find no new data (since when)
        Long terminatedMs;
        int terminatedReports;
        boolean polled;
        final List<Source> sources = new ArrayList<>();

        Query(String queryId) {
            this.queryId = queryId;
        }

        /** Since when the query has had no new data, if it has none now (after its last batch). */
        Long idleSince() {
            if (runningStartMs != null) {
                return null;
            }
            long last = lastEndMs == null ? 0L : lastEndMs;
            Long since = null;
            for (Long t : new Long[] {lastIdleMs, noDataMs}) {
                if (t != null && t >= last && (since == null || t < since)) {
                    since = t;
                }
            }
            return since;
        }

        void stopRunning() {
            runningBatchId = null;
            runningStartMs = null;
        }
    }

    // -- helpers (as collectors/query_state.py) ------------------------------------------------------
    /** The interval of a processing-time trigger from its JVM toString; null for others. */
    static Long triggerIntervalMs(String trigger) {
        Matcher m = TRIGGER.matcher(trigger == null ? "" : trigger);
        return m.find() ? Long.valueOf(m.group(1)) : null;
    }

    /** Epoch ms of Spark's ISO timestamps; null when absent or bad. */
    static Long timeMs(JsonNode ts) {
        if (ts == null || !ts.isTextual() || ts.asText().isEmpty()) {
            return null;
        }
        try {
            return Batches.triggerMs(ts.asText());
        } catch (RuntimeException e) {
            return null;
        }
    }

    /** An offset as JSON data (progress offsets are objects, numbers or JSON text). */
    private JsonNode offset(JsonNode value) {
        if (value != null && value.isTextual()) {
            try {
                JsonNode parsed = mapper.readTree(value.asText());
                return parsed == null || parsed.isMissingNode() ? value : parsed;
            } catch (Exception e) {
                return value;
            }
        }
        return value;
    }

    /** Rows up to an offset where it counts rows ({"rows": n}, a number, nested objects of numbers summed). */
    Long offsetRows(JsonNode raw) {
        JsonNode value = offset(raw);
        if (value == null || value.isNull() || value.isMissingNode() || value.isBoolean()) {
            return null;
        }
        if (value.isNumber()) {
            double v = value.asDouble();
            return v >= 0 ? Long.valueOf(value.isIntegralNumber() ? value.asLong() : (long) v) : null;
        }
        if (value.isObject()) {
            if (value.has("rows")) {
                return offsetRows(value.get("rows"));
            }
            if (value.size() == 0) {
                return null;
            }
            long total = 0;
            for (Iterator<JsonNode> it = value.elements(); it.hasNext(); ) {
                Long n = offsetRows(it.next());
                if (n == null) {
                    return null;
                }
                total += n;
            }
            return total;
        }
        return null;
    }

    /** When the source offered the rows up to this offset (the project's sources' t_ms). */
    Long offsetTimeMs(JsonNode raw) {
        JsonNode value = offset(raw);
        if (value != null && value.isObject()) {
            JsonNode t = value.get("t_ms");
            if (t != null && t.isNumber()) {
                return t.isIntegralNumber() ? t.asLong() : (long) t.asDouble();
            }
        }
        return null;
    }

    /** The offset as text (JSON with sorted keys, as Python's json.dumps(sort_keys=True)); null when too long. */
    String offsetText(JsonNode value) {
        if (value == null || value.isNull() || value.isMissingNode()) {
            return null;
        }
        String text;
        if (value.isTextual()) {
            text = value.asText();
        } else {
            try {
                text = mapper.writeValueAsString(sorted(value));
            } catch (Exception e) {
                return null;
            }
        }
        return text.length() <= MAX_OFFSET_CHARS ? text : null;
    }

    private Object sorted(JsonNode node) {
        if (node.isObject()) {
            Map<String, Object> out = new TreeMap<>();
            node.fields().forEachRemaining(e -> out.put(e.getKey(), sorted(e.getValue())));
            return out;
        }
        if (node.isArray()) {
            List<Object> out = new ArrayList<>();
            node.forEach(n -> out.add(sorted(n)));
            return out;
        }
        return node;
    }

    private Query query(String queryId) {
        Query q = queries.get(queryId);
        if (q == null) {
            if (queries.size() >= MAX_QUERIES) {  // forget the oldest terminated ones first
                String gone = null;
                for (Query old : queries.values()) {
                    if (old.terminatedMs != null) {
                        gone = old.queryId;
                        break;
                    }
                }
                queries.remove(gone != null ? gone : queries.keySet().iterator().next());
            }
            q = new Query(queryId);
            queries.put(queryId, q);
        }
        return q;
    }

    private static void newRun(Query q, String runId) {
        if (runId != null && !runId.isEmpty() && !runId.equals(q.runId)) {
            if (q.runId != null) {  // a restart: the old run's batch and liveness are gone
                q.stopRunning();
                q.lastIdleMs = null;
                q.noDataMs = null;
            }
            q.runId = runId;
            q.terminatedMs = null;
            q.terminatedReports = 0;
        }
    }

    private static String text(JsonNode n) {
        return n == null || n.isNull() || n.isMissingNode() ? null : n.asText();
    }

    // -- events ------------------------------------------------------------------------------------
    /** A Spark job started (its properties and submission time): a job of a micro-batch marks it running. */
    void onJobStart(String queryId, String batch, long submissionMs) {
        if (queryId == null || queryId.isEmpty() || batch == null || !batch.matches("[0-9]+")) {
            return;
        }
        long batchId;
        try {
            batchId = Long.parseLong(batch);
        } catch (NumberFormatException e) {
            return;
        }
        Query q = query(queryId);
        if (q.terminatedMs != null || (q.lastBatchId != null && batchId <= q.lastBatchId)) {
            return;  // a late event of a batch already completed
        }
        if (Long.valueOf(batchId).equals(q.runningBatchId) || (q.runningBatchId == null && q.runningStartMs != null)) {
            q.runningStartMs = Math.min(q.runningStartMs == null || q.runningStartMs == 0 ? submissionMs
                    : q.runningStartMs, submissionMs);
        } else {
            q.runningStartMs = submissionMs;
        }
        q.runningBatchId = batchId;
    }

    /** A completed micro-batch (StreamingQueryProgress JSON). */
    void onProgress(JsonNode p) {
        Query q = query(p.path("id").asText());
        newRun(q, text(p.get("runId")));
        String name = text(p.get("name"));
        if (name != null && !name.isEmpty()) {
            q.name = name;
        }
        long batchId = p.path("batchId").asLong(0);
        Long trigger = timeMs(p.get("timestamp"));
        if (q.lastBatchId != null && batchId < q.lastBatchId) {
            return;
        }
        q.lastBatchId = batchId;
        q.lastTriggerMs = trigger;
        JsonNode duration = p.get("batchDuration");
        if (trigger != null && duration != null && duration.isNumber()) {
            q.lastEndMs = trigger + duration.asLong();
        }
        if (q.runningBatchId == null || q.runningBatchId <= batchId) {
            q.stopRunning();
        }
        JsonNode sources = p.get("sources");
        int n = sources != null && sources.isArray() ? sources.size() : 0;
        while (q.sources.size() < Math.min(n, MAX_SOURCES)) {
            q.sources.add(new Source());
        }
        for (int i = 0; i < Math.min(n, q.sources.size()); i++) {
            Source s = q.sources.get(i);
            JsonNode src = sources.get(i);
            s.description = text(src.get("description"));
            s.processedOffset = src.get("endOffset");
            s.latestOffset = src.get("latestOffset");
            s.processedRows = offsetRows(s.processedOffset);
            JsonNode latest = s.latestOffset != null && !s.latestOffset.isNull() ? s.latestOffset : s.processedOffset;
            Long rows = offsetRows(latest);
            Long at = offsetTimeMs(latest);
            if (at == null) {
                at = offsetTimeMs(s.processedOffset);
            }
            if (at == null) {
                at = trigger;
            }
            if (rows != null && at != null) {
                long[] last = s.points.peekLast();
                if (last != null && (at < last[0] || rows < last[1])) {
                    s.points.clear();  // offsets went back (a new checkpoint, a reset source)
                    last = null;
                }
                if (last == null || at > last[0]) {
                    if (s.points.size() >= RATE_POINTS) {
                        s.points.pollFirst();
                    }
                    s.points.addLast(new long[] {at, rows});
                }
                s.latestRows = rows;
                s.latestMs = at;
            } else {
                s.latestRows = null;
                s.latestMs = null;
            }
            s.reportedRate = Batches.rate(src.get("inputRowsPerSecond"));
            s.metrics.clear();
            JsonNode metrics = src.get("metrics");
            if (metrics != null && metrics.isObject()) {
                metrics.fields().forEachRemaining(e -> {
                    if (e.getKey().contains("OffsetsBehindLatest")) {
                        s.metrics.put(e.getKey(), e.getValue());
                    }
                });
            }
        }
    }

    /** A StreamingQueryListener event ("started", "idle" or "terminated"; its JSON) seen at {@code nowMs}. */
    void onQueryEvent(String kind, JsonNode ev, long nowMs) {
        String queryId = text(ev.get("id"));
        if (queryId == null || queryId.isEmpty()) {
            return;
        }
        Query q = query(queryId);
        String runId = text(ev.get("runId"));
        if ("started".equals(kind)) {
            newRun(q, runId);
            String name = text(ev.get("name"));
            if (name != null && !name.isEmpty()) {
                q.name = name;
            }
        } else if ("idle".equals(kind)) {
            if (runId != null && !runId.isEmpty() && q.runId != null && !runId.equals(q.runId)) {
                return;
            }
            Long at = timeMs(ev.get("timestamp"));
            q.lastIdleMs = at != null && at != 0 ? at : nowMs;
            if (q.runningStartMs != null && q.runningStartMs <= q.lastIdleMs) {
                q.stopRunning();  // that trigger ran no batch
            }
        } else if ("terminated".equals(kind)) {
            if (runId != null && !runId.isEmpty() && q.runId != null && !runId.equals(q.runId)) {
                return;
            }
            q.terminatedMs = nowMs;
            q.stopRunning();
        }
    }

    /** What a poll of the active queries says (as QueryTracker.on_status). */
    void onStatus(List<Poll> polls, long nowMs) {
        java.util.Set<String> seen = new java.util.HashSet<>();
        for (Poll p : polls) {
            if (p.id == null || p.id.isEmpty()) {
                continue;
            }
            seen.add(p.id);
            Query q = query(p.id);
            q.polled = true;
            newRun(q, p.runId);
            if (p.name != null && !p.name.isEmpty()) {
                q.name = p.name;
            }
            if (p.trigger != null) {
                q.triggerMs = triggerIntervalMs(p.trigger);
            }
            if (p.triggerActive && p.dataAvailable) {
                q.noDataMs = null;
                if (q.runningStartMs == null) {
                    q.runningStartMs = nowMs;
                    q.runningBatchId = q.lastBatchId == null ? null : q.lastBatchId + 1;
                }
            } else if (!p.triggerActive) {
                if (q.runningStartMs != null && q.runningStartMs < nowMs) {
                    q.stopRunning();  // the batch ended (progress follows)
                }
                if (p.dataAvailable) {
                    q.noDataMs = null;
                } else if (q.noDataMs == null && p.message != null && p.message.startsWith("Waiting")) {
                    q.noDataMs = nowMs;
                }
            }
        }
        for (Query q : queries.values()) {
            if (!seen.contains(q.queryId) && q.terminatedMs == null && q.polled) {
                q.terminatedMs = nowMs;
                q.stopRunning();
            }
        }
    }

    // -- snapshot ----------------------------------------------------------------------------------
    /** Is any query known that has not terminated (or whose termination is not yet reported)? */
    boolean active() {
        for (Query q : queries.values()) {
            if (q.terminatedMs == null || q.terminatedReports < TERMINATED_REPORTS) {
                return true;
            }
        }
        return false;
    }

    private Map<String, Object> sourceRecord(Source s, long nowMs, Long idleSince) {
        Map<String, Object> out = new LinkedHashMap<>();
        String description = s.description == null || s.description.isEmpty() ? null
                : s.description.length() > 256 ? s.description.substring(0, 256) : s.description;
        out.put("description", description);
        out.put("processed_offset", offsetText(s.processedOffset));
        out.put("latest_offset", offsetText(s.latestOffset));
        out.put("processed_rows", s.processedRows);
        out.put("min_offsets_behind_latest", Batches.rate(s.metrics.get(BEHIND[0])));
        out.put("avg_offsets_behind_latest", Batches.rate(s.metrics.get(BEHIND[1])));
        out.put("max_offsets_behind_latest", Batches.rate(s.metrics.get(BEHIND[2])));
        Double rate = s.arrivalRate();
        out.put("arrival_rows_per_second", rate);
        if (s.processedRows == null || s.latestRows == null || s.latestMs == null) {
            return out;
        }
        long latestRows = Math.max(s.latestRows, s.processedRows);
        long latestMs = s.latestMs;
        double available;
        if (idleSince != null && idleSince >= latestMs && latestRows <= s.processedRows) {
            available = latestRows;  // the last trigger found nothing new: no extrapolation
            rate = 0.0;
        } else {
            available = latestRows + (rate == null ? 0.0 : rate) * Math.max(0, nowMs - latestMs) / 1000.0;
        }
        long backlog = Math.max(0, (long) available - s.processedRows);
        out.put("available_rows", (long) available);
        out.put("backlog_rows", backlog);
        if (backlog > 0) {
            long behind = latestRows - s.processedRows;
            double oldest = behind > 0 && rate != null && rate != 0.0 ? latestMs - behind * 1000.0 / rate : latestMs;
            out.put("oldest_unprocessed_ms", Math.max(0L, (long) oldest));
        }
        return out;
    }

    /** QueryStateRecord maps of every query as of {@code nowMs}; terminated ones are reported a few times. */
    List<Map<String, Object>> snapshot(long nowMs) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (Iterator<Query> it = queries.values().iterator(); it.hasNext(); ) {
            Query q = it.next();
            if (q.terminatedMs != null) {
                if (q.terminatedReports >= TERMINATED_REPORTS) {
                    it.remove();
                    continue;
                }
                q.terminatedReports++;
            }
            Long idleSince = q.idleSince();
            String status = q.terminatedMs != null ? "terminated" : q.runningStartMs != null ? "running"
                    : idleSince != null ? "idle" : "waiting";
            boolean running = "running".equals(status);
            List<Map<String, Object>> sources = new ArrayList<>();
            Long backlog = null;
            Long oldest = null;
            Double rates = null;
            for (Source s : q.sources) {
                Map<String, Object> r = sourceRecord(s, nowMs, idleSince);
                sources.add(r);
                Object b = r.get("backlog_rows");
                if (b != null) {
                    backlog = (backlog == null ? 0L : backlog) + (Long) b;
                    Object o = r.get("oldest_unprocessed_ms");
                    if (o != null && (oldest == null || (Long) o < oldest)) {
                        oldest = (Long) o;
                    }
                }
                Object a = r.get("arrival_rows_per_second");
                if (a != null) {
                    rates = (rates == null ? 0.0 : rates) + (Double) a;
                }
            }
            Map<String, Object> rec = new LinkedHashMap<>();
            rec.put("query_id", q.queryId.length() > 256 ? q.queryId.substring(0, 256) : q.queryId);
            rec.put("run_id", q.runId);
            rec.put("name", q.name);
            rec.put("observed_ms", nowMs);
            rec.put("status", status);
            rec.put("running_batch_id", running ? q.runningBatchId : null);
            rec.put("running_batch_start_ms", running ? q.runningStartMs : null);
            rec.put("running_batch_age_ms", running ? Math.max(0L, nowMs - q.runningStartMs) : null);
            rec.put("last_batch_id", q.lastBatchId);
            rec.put("last_batch_end_ms", q.lastEndMs);
            rec.put("trigger_interval_ms", q.triggerMs);
            rec.put("last_idle_ms", q.lastIdleMs);
            rec.put("backlog_rows", backlog);
            rec.put("oldest_unprocessed_ms", oldest);
            rec.put("arrival_rows_per_second", rates);
            rec.put("sources", sources);
            out.add(rec);
        }
        return out;
    }
}
