package sqlrunner.engine;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Set;

import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Row;

/**
 * The query's changes as a keyed target takes them, where the plan guarantees what {@link KeyedDifference} keeps state
 * to know ({@link Planner#keyedWithoutState}): the query has at most one row per value of the target's key, and the
 * retraction of a key's old row and the addition of its new one come out of one group of the last stateful operator,
 * side by side. A micro-batch's weighted rows for a key then say its row before (weight -1) and after (+1), and become
 * an insert, an update or a delete, or nothing when the two are equal, as {@link KeyedDifference} makes them.
 *
 * <p>Input rows: {@code [weight int, <the target's columns>...]}, a partition's rows as the operator handed them over.
 * Output rows: {@code [kind string, before struct, after struct]}, a group's as soon as its last row is read. What it
 * can see of a broken guarantee fails the micro-batch: a key's rows in two runs of groups in a partition, two rows
 * for a key, a row retracted twice. What {@link KeyedDifference} saw besides, by its copy of the target's rows (a
 * second row for a key held from an earlier micro-batch, the retraction of a row never given), it cannot: the
 * planner's guarantee is what stands for it.
 */
public final class KeyChanges implements MapPartitionsFunction<Row, Row> {
    private static final long serialVersionUID = 1L;

    private final Fields key; // the target's key among the columns
    private final Fields together; // the columns whose values one group of the operator has (some of the key's)
    private final String keyNames; // the key's columns, for messages

    /** @param key the target key's positions among the columns; {@code together}, of the columns grouped together */
    public KeyChanges(int[] key, int[] together, String keyNames) {
        this.key = new Fields(key);
        this.together = new Fields(together);
        this.keyNames = keyNames;
    }

    @Override
    public Iterator<Row> call(Iterator<Row> rows) {
        return new Iterator<Row>() {
            private final ArrayDeque<Row> ready = new ArrayDeque<>(); // the changes of the groups read so far
            private final Set<Row> done = new HashSet<>(); // the keys of the groups before
            private final Map<Row, Map<Row, Long>> run = new LinkedHashMap<>(); // the current group's rows, by key
            private Row group; // the current group's values of the columns grouped together
            private Row next; // the first row of the next group, read ahead

            @Override
            public boolean hasNext() {
                while (ready.isEmpty() && (next != null || rows.hasNext())) {
                    readGroup();
                }
                return !ready.isEmpty();
            }

            @Override
            public Row next() {
                if (!hasNext()) {
                    throw new NoSuchElementException();
                }
                return ready.poll();
            }

            /** One group's rows, up to the next group's first (kept for the next call), into its changes. */
            private void readGroup() {
                group = null;
                while (next != null || rows.hasNext()) {
                    Row weighted = next != null ? next : rows.next();
                    next = null;
                    Row columns = KeyedDifference.columns(weighted);
                    Row of = together.call(columns);
                    if (group != null && !group.equals(of)) {
                        next = weighted;
                        break;
                    }
                    group = of;
                    run.computeIfAbsent(key.call(columns), k -> new HashMap<>())
                            .merge(columns, (long) weighted.getInt(0), Long::sum);
                }
                close(run, done, ready);
            }
        };
    }

    /** The changes of a group's keys, each key seen for the first time in the partition. */
    private void close(Map<Row, Map<Row, Long>> run, Set<Row> done, ArrayDeque<Row> out) {
        List<Row> changes = new ArrayList<>();
        for (Map.Entry<Row, Map<Row, Long>> entry : run.entrySet()) {
            if (!done.add(entry.getKey())) {
                throw new IllegalStateException("the incremental operators handed over the changes of one value of the"
                        + " target's PRIMARY KEY (" + keyNames + ") apart: " + entry.getKey());
            }
            Row before = null;
            Map<Row, Long> after = new HashMap<>();
            for (Map.Entry<Row, Long> change : entry.getValue().entrySet()) {
                long weight = change.getValue();
                if (weight < 0 && (weight < -1 || before != null)) {
                    throw KeyedDifference.neverGiven(change.getKey()); // more than the one row the key had
                }
                if (weight < 0) {
                    before = change.getKey();
                } else if (weight > 0) {
                    after.put(change.getKey(), weight);
                }
            }
            KeyedDifference.change(changes, before, KeyedDifference.only(after, keyNames));
        }
        out.addAll(changes);
        run.clear();
    }
}
