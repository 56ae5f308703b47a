package sqlrunner.engine;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * A changelog source's changes to one key as weighted rows: the key's last row is kept as state, and a micro-batch's
 * changes to the key become the retraction of the row it had (weight -1) and the row it has now (+1).
 *
 * <p>Input rows: {@code [delete boolean, place string, position long, order long, <the table's columns>...]}; the
 * change that counts is the last one by (place, position, order), nulls first, as the recomputing engine takes it.
 * Output rows: {@code [weight int, <the table's columns>...]}. A change that leaves the row as it was, a delete of a
 * key without row and an update of one make no output but what they change.
 */
public final class UpsertNormaliser extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;
    static final int DELETE = 0, PLACE = 1, POSITION = 2, ORDER = 3, COLUMNS = 4;

    private final StructType rowSchema;
    private final int source;
    private transient ValueState<Row> current;

    public UpsertNormaliser(StructType rowSchema) {
        this(rowSchema, -1);
    }

    /** @param source which of the query's sources this is, by position (for the job's status: keys held) */
    public UpsertNormaliser(StructType rowSchema, int source) {
        this.rowSchema = rowSchema;
        this.source = source;
    }

    public int source() {
        return source;
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
        current = getHandle().getValueState("row", Encoders.row(rowSchema), TTLConfig.NONE());
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(Row key, scala.collection.Iterator<Row> changes, TimerValues timers) {
        Row last = null;
        while (changes.hasNext()) {
            Row change = changes.next();
            if (last == null || Order.compareChanges(change, last) >= 0) {
                last = change;
            }
        }
        Row old = current.get(); // null: no row (exists() is a get() of its own)
        Row now = last == null || last.getBoolean(DELETE) ? null : columns(last);
        if (Objects.equals(old, now)) {
            return CollectionConverters.asScala(Collections.<Row>emptyIterator());
        }
        List<Row> out = new ArrayList<>(2);
        if (old != null) {
            out.add(Weighted.of(-1, old));
        }
        if (now != null) {
            out.add(Weighted.of(1, now));
            current.update(now);
        } else {
            current.clear();
        }
        return CollectionConverters.asScala(out.iterator());
    }

    private Row columns(Row change) {
        Object[] values = new Object[rowSchema.size()];
        for (int i = 0; i < values.length; i++) {
            values[i] = change.get(COLUMNS + i);
        }
        return RowFactory.create(values);
    }
}
