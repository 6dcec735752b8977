package io.sparkgovernor;

import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.zip.GZIPInputStream;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.util.JsonProtocol;

/**
 * Replays an event log through the jar's translation, for tests and debugging:
 * {@code java -cp spark-governor-listener.jar:$SPARK_HOME/jars/* io.sparkgovernor.Replay events.jsonl[.gz]}.
 *
 * <p>Each line is a Spark event-log event (rebuilt with Spark's JsonProtocol) or
 * {@code {"Event": "progress", "progress": {...}}} (a StreamingQueryProgress JSON). Prints one JSON
 * line per wire record ({@code {"kind": ..., "record": ...}}), then the templates seen and the
 * orphaned count, so the records can be compared with {@code collectors/events.py} on the same log.
 */
public final class Replay {
    private Replay() {
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        Translator translator = new Translator(null, 1);
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
                if ("progress".equals(node.path("Event").asText())) {
                    print(out, mapper, "batch", Batches.record(node.get("progress"), mapper));
                    continue;
                }
                SparkListenerEvent event = JsonProtocol.sparkEventFromJson(line);
                for (Translator.Record r : translator.handle(event)) {
                    print(out, mapper, r.kind, r.body);
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

    private static void print(PrintStream out, ObjectMapper mapper, String kind, Map<String, Object> body)
            throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("kind", kind);
        m.put("record", body);
        out.println(mapper.writeValueAsString(m));
    }
}
