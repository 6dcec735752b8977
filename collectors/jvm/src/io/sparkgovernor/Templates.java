package io.sparkgovernor;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * Template keys: a stable identity for a query's stage across micro-batches.
 *
 * <p>A line-by-line port of {@code collectors/templates.py} (the Python reporter's
 * {@code TemplateRegistry}): the key is the first 16 hex digits of the SHA-1 of
 * {@code json.dumps([query_id, signature, occurrence])} where the signature is
 * {@code json.dumps([position, stage name, operators, parent positions])}, rendered exactly as
 * Python's {@code json.dumps} does (", " and ": " separators, ASCII-only escapes), so a job
 * attached by the jar and by {@code attach()} reports the same template keys.
 */
final class Templates {
    private static final Pattern CODEGEN = Pattern.compile("^WholeStageCodegen \\(\\d+\\)$");

    /** Template vertex of one stage of one job (templates.py StageTemplate). */
    static final class Template {
        final String key;
        final String name;
        final int ordinal;
        final List<String> operators;
        final List<String> parents;

        Template(String key, String name, int ordinal, List<String> operators, List<String> parents) {
            this.key = key;
            this.name = name;
            this.ordinal = ordinal;
            this.operators = Collections.unmodifiableList(operators);
            this.parents = Collections.unmodifiableList(parents);
        }

        Map<String, Object> toRecord() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("key", key);
            m.put("name", name);
            m.put("ordinal", ordinal);
            m.put("operators", new ArrayList<>(operators));
            m.put("parents", new ArrayList<>(parents));
            return m;
        }
    }

    /** What the registry needs of one stage (from StageInfo, or from a test). */
    static final class StageDesc {
        final int stageId;
        final String name;
        final List<String> operators;  // de-duplicated scope names in RDD-id order
        final List<Integer> parentIds;  // in StageInfo order
        final int numTasks;

        StageDesc(int stageId, String name, List<String> operators, List<Integer> parentIds, int numTasks) {
            this.stageId = stageId;
            this.name = name == null ? "" : name;
            this.operators = operators;
            this.parentIds = parentIds;
            this.numTasks = numTasks;
        }
    }

    private static final class BatchKey {
        final String queryId;
        final long batchId;

        BatchKey(String queryId, long batchId) {
            this.queryId = queryId;
            this.batchId = batchId;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof BatchKey && ((BatchKey) o).queryId.equals(queryId) && ((BatchKey) o).batchId == batchId;
        }

        @Override
        public int hashCode() {
            return queryId.hashCode() * 31 + Long.hashCode(batchId);
        }
    }

    // bookkeeping for a handful of recent batches only (insertion order, as Python's dict)
    private final LinkedHashMap<BatchKey, Map<String, Integer>> seenInBatch = new LinkedHashMap<>();
    private final Map<BatchKey, Integer> stagesInBatch = new HashMap<>();

    static String readableName(int ordinal, List<String> operators) {
        List<String> shown = new ArrayList<>();
        for (String op : operators) {
            if (!CODEGEN.matcher(op).matches()) {
                shown.add(op);
            }
        }
        if (shown.isEmpty()) {
            shown = operators.isEmpty() ? Collections.singletonList("stage") : operators;
        }
        return "s" + ordinal + " " + String.join(" > ", shown);
    }

    /** Map each stage id of a job to its template (templates.py TemplateRegistry.templates_for_job). */
    Map<Integer, Template> templatesForJob(String queryId, long batchId, List<StageDesc> stageInfos) {
        BatchKey batch = new BatchKey(queryId, batchId);
        if (!seenInBatch.containsKey(batch)) {
            Iterator<BatchKey> it = seenInBatch.keySet().iterator();
            int excess = seenInBatch.size() - 8;
            while (excess-- > 0 && it.hasNext()) {
                BatchKey old = it.next();
                it.remove();
                stagesInBatch.remove(old);
            }
            seenInBatch.put(batch, new HashMap<>());
            stagesInBatch.put(batch, 0);
        }
        Map<String, Integer> seen = seenInBatch.get(batch);
        int offset = stagesInBatch.get(batch);
        List<StageDesc> infos = new ArrayList<>(stageInfos);
        infos.sort((a, b) -> Integer.compare(a.stageId, b.stageId));
        Map<Integer, Integer> position = new HashMap<>();
        for (int i = 0; i < infos.size(); i++) {
            position.put(infos.get(i).stageId, i);
        }
        Map<Integer, Template> out = new LinkedHashMap<>();
        for (int i = 0; i < infos.size(); i++) {
            StageDesc info = infos.get(i);
            List<Integer> parents = new ArrayList<>();
            for (Integer p : info.parentIds) {
                Integer pos = position.get(p);
                if (pos != null) {
                    parents.add(pos);
                }
            }
            Collections.sort(parents);
            StringBuilder sig = new StringBuilder("[").append(i).append(", ");
            PyJson.string(sig, info.name);
            sig.append(", ");
            PyJson.stringList(sig, info.operators);
            sig.append(", [");
            for (int k = 0; k < parents.size(); k++) {
                sig.append(k == 0 ? "" : ", ").append(parents.get(k));
            }
            sig.append("]]");
            String signature = sig.toString();
            int occurrence = seen.getOrDefault(signature, 0);
            seen.put(signature, occurrence + 1);
            StringBuilder outer = new StringBuilder("[");
            PyJson.string(outer, queryId);
            outer.append(", ");
            PyJson.string(outer, signature);
            outer.append(", ").append(occurrence).append("]");
            String digest = sha1Hex(outer.toString()).substring(0, 16);
            out.put(info.stageId, new Template(digest, readableName(offset + i, info.operators), offset + i,
                    info.operators, Collections.emptyList()));
        }
        stagesInBatch.put(batch, offset + infos.size());
        for (StageDesc info : infos) {
            Template t = out.get(info.stageId);
            List<String> parentKeys = new ArrayList<>();
            for (Integer p : info.parentIds) {
                Template pt = out.get(p);
                if (pt != null) {
                    parentKeys.add(pt.key);
                }
            }
            out.put(info.stageId, new Template(t.key, t.name, t.ordinal, t.operators, parentKeys));
        }
        return out;
    }

    static String sha1Hex(String text) {
        try {
            byte[] d = MessageDigest.getInstance("SHA-1").digest(text.getBytes(StandardCharsets.UTF_8));
            StringBuilder sb = new StringBuilder(40);
            for (byte b : d) {
                sb.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
            }
            return sb.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The subset of Python's {@code json.dumps} (default arguments) the template keys need. */
    static final class PyJson {
        private PyJson() {
        }

        static void string(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"': sb.append("\\\""); break;
                    case '\\': sb.append("\\\\"); break;
                    case '\n': sb.append("\\n"); break;
                    case '\r': sb.append("\\r"); break;
                    case '\t': sb.append("\\t"); break;
                    case '\b': sb.append("\\b"); break;
                    case '\f': sb.append("\\f"); break;
                    default:
                        if (c < 0x20 || c > 0x7e) {  // ensure_ascii: everything outside ' '..'~'
                            String hex = Integer.toHexString(c);
                            sb.append("\\u");
                            for (int k = hex.length(); k < 4; k++) {
                                sb.append('0');
                            }
                            sb.append(hex);
                        } else {
                            sb.append(c);
                        }
                }
            }
            sb.append('"');
        }

        static void stringList(StringBuilder sb, List<String> items) {
            sb.append('[');
            for (int k = 0; k < items.size(); k++) {
                if (k > 0) {
                    sb.append(", ");
                }
                string(sb, items.get(k));
            }
            sb.append(']');
        }
    }
}
