package sqlrunner.engine;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * The query's changes as its target takes them: each value of the target's PRIMARY KEY keeps its one row, so that a
 * micro-batch's weighted rows become an insert, an update or a delete of the key, or nothing when the key's row is as
 * it was. A target without key is grouped by all its columns and keeps each row with how many times the query gives
 * it: a row given more (fewer) times than before is inserted (deleted) that many times.
 *
 * <p>Input rows: {@code [weight int, <the target's columns>...]}, grouped by the key. Output rows: {@code [kind string
 * (insert, update, delete), before struct, after struct]}. A key the query gives more than one row for fails the
 * micro-batch (the job computes the whole difference before its sink writes any), as a keyed target holds one row
 * per key.
 */
public final class KeyedDifference extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;

    private final StructType rowSchema;
    private final String key; // the key's columns, for messages; null: the target has none

    private transient MapState<Row, Long> rows; // a target without key: each row with how many times it is there
    private transient ValueState<Row> row; // a keyed target: the key's one row (more fails the micro-batch)

    /** @param key the target's PRIMARY KEY columns, comma separated (null: none, grouped by every column) */
    public KeyedDifference(StructType rowSchema, String key) {
        this.rowSchema = rowSchema;
        this.key = key;
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
        if (key == null) {
            rows = getHandle().getMapState("rows", Encoders.row(rowSchema), Encoders.LONG(), TTLConfig.NONE());
        } else {
            row = getHandle().getValueState("row", Encoders.row(rowSchema), TTLConfig.NONE());
        }
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(Row group, scala.collection.Iterator<Row> input, TimerValues timers) {
        Map<Row, Long> delta = new HashMap<>();
        while (input.hasNext()) {
            Row change = input.next();
            delta.merge(columns(change), (long) change.getInt(0), Long::sum);
        }
        List<Row> out = new ArrayList<>();
        if (key == null) {
            for (Map.Entry<Row, Long> change : delta.entrySet()) {
                long before = count(change.getKey());
                long after = before + change.getValue();
                store(change.getKey(), after);
                for (long i = after; i < before; i++) {
                    out.add(RowFactory.create("delete", change.getKey(), null));
                }
                for (long i = before; i < after; i++) {
                    out.add(RowFactory.create("insert", null, change.getKey()));
                }
            }
            return CollectionConverters.asScala(out.iterator());
        }
        Row before = row.get(); // null: none (exists() is a get() of its own)
        Map<Row, Long> after = new HashMap<>(delta);
        if (before != null) {
            after.merge(before, 1L, Long::sum);
        }
        Row now = only(after, key);
        if (now == null) {
            row.clear();
        } else if (!now.equals(before)) {
            row.update(now);
        }
        change(out, before, now);
        return CollectionConverters.asScala(out.iterator());
    }

    /** A key's row going from {@code before} to {@code now} (null: none) as the target takes it, if it changed. */
    static void change(List<Row> out, Row before, Row now) {
        if (before == null && now != null) {
            out.add(RowFactory.create("insert", null, now));
        } else if (before != null && now == null) {
            out.add(RowFactory.create("delete", before, null));
        } else if (before != null && !Objects.equals(before, now)) {
            out.add(RowFactory.create("update", before, now));
        }
    }

    /** A weighted row's columns: the row without its weight in front. */
    static Row columns(Row weighted) {
        Object[] values = new Object[weighted.size() - 1];
        for (int i = 0; i < values.length; i++) {
            values[i] = weighted.get(i + 1);
        }
        return RowFactory.create(values);
    }

    static IllegalStateException neverGiven(Row row) {
        return new IllegalStateException("the incremental query retracted a row of its result it never gave: " + row);
    }

    private long count(Row row) {
        Long count = rows.getValue(row); // null: not there (containsKey is a getValue of its own)
        return count == null ? 0L : count;
    }

    private void store(Row row, long count) {
        if (count < 0) {
            throw neverGiven(row);
        }
        if (count == 0) {
            rows.removeKey(row);
        } else {
            rows.updateValue(row, count);
        }
    }

    /** The key's one row after a micro-batch (null: none); a row taken away more than it was there, or more than one
     * row, fails the micro-batch. {@code key}: the key's columns, for the message. */
    static Row only(Map<Row, Long> counts, String key) {
        long total = 0;
        Row found = null;
        for (Map.Entry<Row, Long> entry : counts.entrySet()) {
            if (entry.getValue() < 0) {
                throw neverGiven(entry.getKey());
            }
            if (entry.getValue() > 0) {
                total += entry.getValue();
                found = entry.getKey();
            }
        }
        if (total > 1) {
            throw new IllegalStateException("the query gives " + total + " rows for one value of the target's PRIMARY KEY ("
                    + key + "); a keyed target holds one row per key: group by the key, or declare the key the query's "
                    + "rows have");
        }
        return found;
    }
}
