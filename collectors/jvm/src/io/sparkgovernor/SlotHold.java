package io.sparkgovernor;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Row;

/**
 * The last step of an executor's warm-up task ({@code collectors/executor_warmup.py}): after the task's rows
 * (the Python worker's warm-up) are read, it keeps the task's slot while the launch hold's rule says the job's
 * waiting tasks are the old executors' to take ({@link LaunchHold#awaitSlot}). Without it the warmed executor
 * would take one of them the moment its warm-up ended and run it slower than a warm executor would.
 *
 * <p>Partition {@code i} of the warm-up is for {@code executors[i]}; a task that ran elsewhere (Spark's
 * locality wait gave up on its executor) keeps no slot. Returns the rows it read and one more, {@code
 * "slot-held-ms:<ms>"}.
 */
public final class SlotHold implements MapPartitionsFunction<Row, String> {
    private static final long serialVersionUID = 1L;
    /** The prefix of the row that reports the ms the slot was kept. */
    public static final String HELD = "slot-held-ms:";
    private final String[] executors;

    public SlotHold(String[] executors) {
        this.executors = executors.clone();
    }

    @Override
    public Iterator<String> call(Iterator<Row> rows) {
        List<String> out = new ArrayList<>();
        while (rows.hasNext()) {
            out.add(String.valueOf(rows.next().get(0)));
        }
        TaskContext task = TaskContext.get();
        long held = 0L;
        if (task != null && task.partitionId() < executors.length
                && executors[task.partitionId()].equals(SparkEnv.get().executorId())) {
            held = LaunchHold.awaitSlot(task.stageId());
        }
        out.add(HELD + held);
        return out.iterator();
    }
}
