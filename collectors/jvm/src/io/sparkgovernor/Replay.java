package io.sparkgovernor;

import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.GZIPInputStream;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.util.JsonProtocol;

/**
 * Replays an event log through the jar's translation, for tests and debugging:
 * {@code java -cp spark-governor-listener.jar:$SPARK_HOME/jars/* io.sparkgovernor.Replay events.jsonl[.gz]}.
 *
 * <p>Each line is a Spark event-log event (rebuilt with Spark's JsonProtocol) or
 * {@code {"Event": "progress", "progress": {...}}} (a StreamingQueryProgress JSON). Prints one JSON
 * line per wire record ({@code {"kind": ..., "record": ...}}), then the templates seen and the
 * orphaned count, so the records can be compared with {@code collectors/events.py} on the same log.
 *
 * <p>The same events also drive the query-state tracker ({@link QueryStates}), with three more kinds of line:
 * {@code {"Event": "query", "kind": "started"|"idle"|"terminated", "event": {...}, "now_ms": N}} (a
 * StreamingQueryListener event's JSON), {@code {"Event": "status", "polls": [...], "now_ms": N}} (a status poll:
 * id, run_id, name, trigger, message, isDataAvailable, isTriggerActive) and {@code {"Event": "snapshot",
 * "now_ms": N}}, which prints {@code {"kind": "queries", "record": [...]}}: the QueryStateRecords of
 * {@code collectors/query_state.py} on the same sequence.
 *
 * <p>And the edge fold ({@link TaskFold}): {@code {"Event": "fold", "window_ms": N, "now_ms": N, "final": B,
 * "task_detail": "failed"}} folds the tasks and stages translated since the previous fold and prints
 * {@code {"kind": "folded", "record": {...}}}: the records of {@code policies/task_fold.py} on the same reports.
 */
public final class Replay {
    private Replay() {
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        Translator translator = new Translator(null, 1);
        QueryStates states = new QueryStates(mapper);
        TaskFold fold = null;
        List<Map<String, Object>> tasks = new ArrayList<>();
        List<Map<String, Object>> stages = new ArrayList<>();
        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        InputStream in = new FileInputStream(args[0]);
        if (args[0].endsWith(".gz")) {
            in = new GZIPInputStream(in);
        }
        try (BufferedReader reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = reader.readLine()) != null) {
                if (line.trim().isEmpty()) {
                    continue;
                }
                JsonNode node = mapper.readTree(line);
                String kind = node.path("Event").asText();
                if ("progress".equals(kind)) {
                    print(out, mapper, "batch", Batches.record(node.get("progress"), mapper));
                    states.onProgress(node.get("progress"));
                    continue;
                }
                if ("query".equals(kind)) {
                    states.onQueryEvent(node.path("kind").asText(), node.get("event"), node.path("now_ms").asLong());
                    continue;
                }
                if ("status".equals(kind)) {
                    List<QueryStates.Poll> polls = new ArrayList<>();
                    for (JsonNode p : node.path("polls")) {
                        polls.add(new QueryStates.Poll(text(p, "id"), text(p, "run_id"), text(p, "name"),
                                text(p, "trigger"), text(p, "message"), p.path("isDataAvailable").asBoolean(),
                                p.path("isTriggerActive").asBoolean()));
                    }
                    states.onStatus(polls, node.path("now_ms").asLong());
                    continue;
                }
                if ("fold".equals(kind)) {
                    if (fold == null) {
                        fold = new TaskFold(node.path("task_detail").asText("failed"));
                    }
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("kind", "folded");
                    m.put("record", fold.fold(tasks, stages, node.path("window_ms").asLong(),
                            node.path("now_ms").asLong(), node.path("final").asBoolean()));
                    out.println(mapper.writeValueAsString(m));
                    tasks = new ArrayList<>();
                    stages = new ArrayList<>();
                    continue;
                }
                if ("snapshot".equals(kind)) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("kind", "queries");
                    m.put("record", states.snapshot(node.path("now_ms").asLong()));
                    out.println(mapper.writeValueAsString(m));
                    continue;
                }
                SparkListenerEvent event = JsonProtocol.sparkEventFromJson(line);
                if (event instanceof SparkListenerJobStart) {
                    java.util.Properties props = ((SparkListenerJobStart) event).properties();
                    if (props != null) {
                        states.onJobStart(props.getProperty(QueryStates.QUERY_ID),
                                props.getProperty(QueryStates.BATCH_ID), ((SparkListenerJobStart) event).time());
                    }
                }
                for (Translator.Record r : translator.handle(event)) {
                    print(out, mapper, r.kind, r.body);
                    if ("task".equals(r.kind)) {
                        tasks.add(r.body);
                    } else if ("stage".equals(r.kind)) {
                        stages.add(r.body);
                    }
                }
            }
        }
        Map<String, Object> tail = new LinkedHashMap<>();
        Map<String, Object> templates = new LinkedHashMap<>();
        translator.knownTemplates.forEach((k, t) -> templates.put(k, t.toRecord()));
        tail.put("templates", templates);
        tail.put("orphaned", translator.orphaned);
        tail.put("slots", translator.slots());
        out.println(mapper.writeValueAsString(tail));
        out.flush();
    }

    private static String text(JsonNode node, String field) {
        JsonNode n = node.get(field);
        return n == null || n.isNull() ? null : n.asText();
    }

    private static void print(PrintStream out, ObjectMapper mapper, String kind, Map<String, Object> body)
            throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("kind", kind);
        m.put("record", body);
        out.println(mapper.writeValueAsString(m));
    }
}
