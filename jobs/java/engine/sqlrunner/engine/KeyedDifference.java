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
import org.apache.spark.sql.types.StructType;

import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The query's changes as its target takes them: the rows of each value of the target's PRIMARY KEY kept (each with how
 * many times the query gives it), so that a micro-batch's weighted rows become an insert, an update or a delete of the
 * key, or nothing when the key's row is as it was. A target without key is grouped by all its columns: a row the query
 * gives more (fewer) times than before is inserted (deleted) that many times.
 *
 * <p>Input rows: {@code [weight int, <the target's columns>...]}, grouped by the key. Output rows: {@code [kind string
 * (insert, update, delete), before struct, after struct]}. A key the query gives more than one row for fails the
 * micro-batch before anything is written, as a keyed target holds one row per key.
 */
public final class KeyedDifference extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;

    private final StructType rowSchema;
    private final String key; // the key's columns, for messages; null: the target has none

    private transient MapState<Row, Long> rows;

    /** @param key the target's PRIMARY KEY columns, comma separated (null: none, grouped by every column) */
    public KeyedDifference(StructType rowSchema, String key) {
        this.rowSchema = rowSchema;
        this.key = key;
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
        rows = getHandle().getMapState("rows", Encoders.row(rowSchema), Encoders.LONG(), TTLConfig.NONE());
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(Row group, scala.collection.Iterator<Row> input, TimerValues timers) {
        Map<Row, Long> delta = new HashMap<>();
        while (input.hasNext()) {
            Row row = input.next();
            Object[] values = new Object[row.size() - 1];
            for (int i = 0; i < values.length; i++) {
                values[i] = row.get(i + 1);
            }
            delta.merge(RowFactory.create(values), (long) row.getInt(0), Long::sum);
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
        Row before = only(held());
        for (Map.Entry<Row, Long> change : delta.entrySet()) {
            store(change.getKey(), count(change.getKey()) + change.getValue());
        }
        Row after = only(held());
        if (before == null && after != null) {
            out.add(RowFactory.create("insert", null, after));
        } else if (before != null && after == null) {
            out.add(RowFactory.create("delete", before, null));
        } else if (before != null && !Objects.equals(before, after)) {
            out.add(RowFactory.create("update", before, after));
        }
        return CollectionConverters.asScala(out.iterator());
    }

    private long count(Row row) {
        return rows.containsKey(row) ? rows.getValue(row) : 0L;
    }

    private void store(Row row, long count) {
        if (count < 0) {
            throw new IllegalStateException("the incremental query retracted a row of its result it never gave: " + row);
        }
        if (count == 0) {
            rows.removeKey(row);
        } else {
            rows.updateValue(row, count);
        }
    }

    private List<Tuple2<Row, Long>> held() {
        List<Tuple2<Row, Long>> found = new ArrayList<>();
        scala.collection.Iterator<Tuple2<Row, Long>> entries = rows.iterator();
        while (entries.hasNext()) {
            found.add(entries.next());
        }
        return found;
    }

    /** The key's one row (null: none); more than one fails the micro-batch. */
    private Row only(List<Tuple2<Row, Long>> held) {
        long total = 0;
        for (Tuple2<Row, Long> entry : held) {
            total += entry._2();
        }
        if (total > 1) {
            throw new IllegalStateException("the query gives " + total + " rows for one value of the target's PRIMARY KEY ("
                    + key + "); a keyed target holds one row per key: group by the key, or declare the key the query's "
                    + "rows have");
        }
        return held.isEmpty() ? null : held.get(0)._1();
    }
}
