package io.sparkgovernor;

import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.ArrayList;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * A micro-batch's progress (Spark's {@code StreamingQueryProgress.json()}) to a wire
 * {@code BatchRecord}: a port of {@code batch_record} and {@code paced_durations} in
 * {@code collectors/events.py}.
 */
final class Batches {
    private Batches() {
    }

    static long toLong(JsonNode n) {
        if (n == null || n.isNull() || n.isMissingNode()) {
            return 0L;
        }
        if (n.isNumber()) {
            return Math.max(0L, n.asLong());
        }
        if (n.isTextual()) {
            try {
                return Math.max(0L, Long.parseLong(n.asText().trim()));
            } catch (NumberFormatException e) {
                return 0L;
            }
        }
        if (n.isBoolean()) {
            return n.asBoolean() ? 1L : 0L;
        }
        return 0L;
    }

    static Double rate(JsonNode n) {
        if (n == null || n.isNull() || n.isMissingNode()) {
            return null;
        }
        double v;
        if (n.isNumber()) {
            v = n.asDouble();
        } else if (n.isTextual()) {
            try {
                v = Double.parseDouble(n.asText());
            } catch (NumberFormatException e) {
                return null;
            }
        } else {
            return null;
        }
        return v >= 0 && !Double.isNaN(v) && !Double.isInfinite(v) ? v : null;
    }

    /** Epoch ms of an ISO timestamp, computed as Python's int(datetime.timestamp() * 1000). */
    static long triggerMs(String ts) {
        if (ts == null || ts.isEmpty()) {
            return 0L;
        }
        Instant t = OffsetDateTime.parse(ts).toInstant();
        long micros = Math.addExact(Math.multiplyExact(t.getEpochSecond(), 1_000_000L), t.getNano() / 1000);
        double seconds = (double) micros / 1e6;
        return Math.max(0L, (long) (seconds * 1000));
    }

    static Map<String, Object> pacedDurations(JsonNode progress, ObjectMapper mapper) {
        Map<String, Object> out = new LinkedHashMap<>();
        JsonNode sources = progress.get("sources");
        if (sources == null || !sources.isArray()) {
            return out;
        }
        for (JsonNode source : sources) {
            JsonNode end = source.get("endOffset");
            if (end != null && end.isTextual()) {
                try {
                    end = mapper.readTree(end.asText());
                } catch (Exception e) {
                    continue;
                }
            }
            if (end != null && end.isObject() && end.has("interval_ms")) {
                out.put("batchInterval", toLong(end.get("interval_ms")));
                JsonNode q = end.get("queueing_ms");
                if (q != null && !q.isNull()) {
                    out.put("batchQueueing", toLong(q));
                }
                return out;
            }
        }
        return out;
    }

    static String text(JsonNode n) {
        return n == null || n.isNull() ? null : (n.isTextual() ? n.asText() : n.toString());
    }

    static Map<String, Object> record(JsonNode p, ObjectMapper mapper) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("query_id", text(p.get("id")));
        r.put("run_id", text(p.get("runId")));
        String name = text(p.get("name"));
        r.put("name", name == null || name.isEmpty() ? null : name);
        r.put("batch_id", toLong(p.get("batchId")));
        r.put("trigger_ms", triggerMs(text(p.get("timestamp"))));
        r.put("batch_duration_ms", toLong(p.get("batchDuration")));
        Map<String, Object> durations = new LinkedHashMap<>();
        JsonNode d = p.get("durationMs");
        if (d != null && d.isObject()) {
            for (Iterator<String> it = d.fieldNames(); it.hasNext(); ) {
                String k = it.next();
                JsonNode v = d.get(k);
                durations.put(k, toLong(v));
            }
        }
        durations.putAll(pacedDurations(p, mapper));
        r.put("durations_ms", durations);
        r.put("num_input_rows", toLong(p.get("numInputRows")));
        r.put("input_rows_per_second", rate(p.get("inputRowsPerSecond")));
        r.put("processed_rows_per_second", rate(p.get("processedRowsPerSecond")));
        List<JsonNode> state = new ArrayList<>();
        JsonNode so = p.get("stateOperators");
        if (so != null && so.isArray()) {
            so.forEach(state::add);
        }
        r.put("state_operators", state);
        Map<String, Object> eventTime = new LinkedHashMap<>();
        JsonNode et = p.get("eventTime");
        if (et != null && et.isObject()) {
            for (Iterator<String> it = et.fieldNames(); it.hasNext(); ) {
                String k = it.next();
                JsonNode v = et.get(k);
                eventTime.put(k, text(v) == null ? "None" : text(v));
            }
        }
        r.put("event_time", eventTime);
        Map<String, Object> observed = new LinkedHashMap<>();
        JsonNode om = p.get("observedMetrics");
        if (om != null && om.isObject()) {
            for (Iterator<String> it = om.fieldNames(); it.hasNext(); ) {
                String k = it.next();
                JsonNode v = om.get(k);
                observed.put(k, v.isObject() ? v : text(v));
            }
        }
        r.put("observed_metrics", observed);
        return r;
    }
}
