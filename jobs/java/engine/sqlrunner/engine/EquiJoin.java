package sqlrunner.engine;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

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
 * A join on equal keys of two weighted inputs, both sides kept in the state store by their join key (each row with
 * how many times it is there), so that a micro-batch's changes on either side give exactly the change of the join:
 * {@code Δ(L⋈R) = ΔL⋈R + L⋈ΔR + ΔL⋈ΔR}, and, for an outer join, the rows padded with NULLs as a row's partners come
 * and go (the padded row is retracted when the first partner arrives, and emitted again when the last one goes).
 *
 * <p>Input rows: {@code [side int (0 left, 1 right), weight int, left struct, right struct]}, the struct of the
 * other side NULL, grouped by the join key. A key with a NULL in it matches nothing, as SQL's equality does: its
 * rows are not kept (but by a side given its source's changes, below), and an outer join's preserved side passes
 * them on padded. Output rows: {@code [weight int, <left's columns>..., <right's columns>...]}. Conditions of the
 * ON clause beyond the keys are applied after this operator for an inner join; the planner does not give it an outer
 * join that has any.
 *
 * <p>A side whose input has at most one row per join key (the planner knows: its source's PRIMARY KEY or a GROUP
 * BY's keys are among the join keys) is kept as that one row, a value read and written with one state access, where
 * any other side is a map of rows to how many times each is there, read with a scan of the key's entries. Such a
 * side sent a second row for a key fails the query rather than keep what its input cannot hold.
 *
 * <p>A side that is one source's table seen through filters and renames, joined by exactly the source's PRIMARY
 * KEY, may instead be given the source's changes themselves ({@code [delete, place, position, order, <the side's
 * columns>...]}, as {@link UpsertNormaliser} takes them, a row failing the side's filters a delete): the side keeps
 * the key's row as the normaliser would, and the key's last change in the micro-batch, against that row, is the
 * side's change. Such a query has one operator and one exchange less per source.
 */
public final class EquiJoin extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;
    static final int SIDE = 0, WEIGHT = 1, LEFT = 2, RIGHT = 3;

    private final StructType leftSchema, rightSchema;
    private final boolean keepLeft, keepRight; // the left (right) rows without partner are emitted padded
    private final boolean leftUnique, rightUnique; // the side has at most one row per join key: kept as a value
    private final boolean leftChanges, rightChanges; // the side is given its source's changes (and kept as a value)

    private transient MapState<Row, Long> left, right;
    private transient ValueState<Row> leftRow, rightRow;

    /**
     * @param joinType inner, left, right or full
     * @param leftUnique the left input has at most one row per join key (kept as a value, not a map); so too
     *     {@code rightUnique}
     */
    public EquiJoin(StructType leftSchema, StructType rightSchema, String joinType, boolean leftUnique,
            boolean rightUnique) {
        this(leftSchema, rightSchema, joinType, leftUnique, rightUnique, false, false);
    }

    /**
     * @param leftChanges the left input is its source's changes (see above), not weighted rows; so too
     *     {@code rightChanges}. Such a side is kept as its one row.
     */
    public EquiJoin(StructType leftSchema, StructType rightSchema, String joinType, boolean leftUnique,
            boolean rightUnique, boolean leftChanges, boolean rightChanges) {
        this.leftSchema = leftSchema;
        this.rightSchema = rightSchema;
        this.leftUnique = leftUnique || leftChanges;
        this.rightUnique = rightUnique || rightChanges;
        this.leftChanges = leftChanges;
        this.rightChanges = rightChanges;
        switch (joinType) {
            case "inner": keepLeft = false; keepRight = false; break;
            case "left": keepLeft = true; keepRight = false; break;
            case "right": keepLeft = false; keepRight = true; break;
            case "full": keepLeft = true; keepRight = true; break;
            default: throw new IllegalArgumentException("no incremental join of type " + joinType);
        }
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
        if (leftUnique) { // a side given its source's changes keeps what its normaliser would have: named apart
            leftRow = getHandle().getValueState(leftChanges ? "leftSource" : "leftRow", Encoders.row(leftSchema),
                    TTLConfig.NONE());
        } else {
            left = getHandle().getMapState("left", Encoders.row(leftSchema), Encoders.LONG(), TTLConfig.NONE());
        }
        if (rightUnique) {
            rightRow = getHandle().getValueState(rightChanges ? "rightSource" : "rightRow", Encoders.row(rightSchema),
                    TTLConfig.NONE());
        } else {
            right = getHandle().getMapState("right", Encoders.row(rightSchema), Encoders.LONG(), TTLConfig.NONE());
        }
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(Row key, scala.collection.Iterator<Row> rows, TimerValues timers) {
        Map<Row, Long> deltaLeft = new HashMap<>(), deltaRight = new HashMap<>();
        Row lastLeft = null, lastRight = null; // a side given its source's changes: the key's last one
        while (rows.hasNext()) {
            Row row = rows.next();
            boolean isLeft = row.getInt(SIDE) == 0;
            Row values = row.getStruct(isLeft ? LEFT : RIGHT);
            if (isLeft && leftChanges) {
                lastLeft = lastLeft == null || Order.compareChanges(values, lastLeft) >= 0 ? values : lastLeft;
            } else if (!isLeft && rightChanges) {
                lastRight = lastRight == null || Order.compareChanges(values, lastRight) >= 0 ? values : lastRight;
            } else {
                (isLeft ? deltaLeft : deltaRight).merge(values, (long) row.getInt(WEIGHT), Long::sum);
            }
        }
        deltaLeft.values().removeIf(w -> w == 0);
        deltaRight.values().removeIf(w -> w == 0);
        List<Row> out = new ArrayList<>();
        // a side given its source's changes: its row before, and its change (the key's last change against it)
        Map<Row, Long> oldLeft = leftChanges ? read(leftRow) : null;
        Map<Row, Long> oldRight = rightChanges ? read(rightRow) : null;
        if (lastLeft != null) {
            changed(deltaLeft, oldLeft, lastLeft, leftSchema.size());
        }
        if (lastRight != null) {
            changed(deltaRight, oldRight, lastRight, rightSchema.size());
        }
        if (anyNull(key)) { // matches nothing: the preserved side's rows go on padded, nothing else is kept
            if (leftChanges) {
                apply(leftRow, oldLeft, deltaLeft, "left");
            }
            if (rightChanges) {
                apply(rightRow, oldRight, deltaRight, "right");
            }
            if (keepLeft) {
                deltaLeft.forEach((l, w) -> out.add(pair(w, l, null)));
            }
            if (keepRight) {
                deltaRight.forEach((r, w) -> out.add(pair(w, null, r)));
            }
            return CollectionConverters.asScala(out.iterator());
        }
        // Both sides of the key, whole: a change on one side meets every row of the other, and an outer join's
        // padded rows all change when the other side's first row arrives or its last goes.
        if (oldLeft == null) {
            oldLeft = leftUnique ? read(leftRow) : read(left);
        }
        if (oldRight == null) {
            oldRight = rightUnique ? read(rightRow) : read(right);
        }
        Map<Row, Long> rightBeforeRows = oldRight;
        long leftBefore = total(oldLeft), rightBefore = total(oldRight);
        // ΔL ⋈ R(before)
        deltaLeft.forEach((l, wl) -> rightBeforeRows.forEach((r, wr) -> out.add(pair(wl * wr, l, r))));
        Map<Row, Long> newLeft = leftUnique ? apply(leftRow, oldLeft, deltaLeft, "left")
                : apply(left, oldLeft, deltaLeft, "left");
        // L(after) ⋈ ΔR
        deltaRight.forEach((r, wr) -> newLeft.forEach((l, wl) -> out.add(pair(wl * wr, l, r))));
        Map<Row, Long> newRight = rightUnique ? apply(rightRow, oldRight, deltaRight, "right")
                : apply(right, oldRight, deltaRight, "right");
        long leftAfter = total(newLeft), rightAfter = total(newRight);
        if (keepLeft) {
            padded(out, oldLeft, rightBefore == 0, newLeft, rightAfter == 0, true);
        }
        if (keepRight) {
            padded(out, oldRight, leftBefore == 0, newRight, leftAfter == 0, false);
        }
        return CollectionConverters.asScala(out.iterator());
    }

    /**
     * The change of a side given its source's changes: its row {@code before} (none, or one) retracted and the row
     * {@code last} leaves added, when they differ; a delete leaves none.
     */
    private static void changed(Map<Row, Long> delta, Map<Row, Long> before, Row last, int columns) {
        Row now = null;
        if (!last.getBoolean(UpsertNormaliser.DELETE)) {
            Object[] values = new Object[columns];
            for (int i = 0; i < columns; i++) {
                values[i] = last.get(UpsertNormaliser.COLUMNS + i);
            }
            now = RowFactory.create(values);
        }
        if (now != null && before.containsKey(now)) {
            return; // the row it had
        }
        before.keySet().forEach(row -> delta.put(row, -1L));
        if (now != null) {
            delta.put(now, 1L);
        }
    }

    /** The change of one side's padded rows: all of them while the other side has no row, none otherwise. */
    private void padded(List<Row> out, Map<Row, Long> before, boolean paddedBefore, Map<Row, Long> after,
            boolean paddedAfter, boolean isLeft) {
        Map<Row, Long> change = new HashMap<>();
        if (paddedBefore) {
            before.forEach((row, w) -> change.merge(row, -w, Long::sum));
        }
        if (paddedAfter) {
            after.forEach((row, w) -> change.merge(row, w, Long::sum));
        }
        change.forEach((row, w) -> {
            if (w != 0) {
                out.add(isLeft ? pair(w, row, null) : pair(w, null, row));
            }
        });
    }

    private static boolean anyNull(Row key) {
        for (int i = 0; i < key.size(); i++) {
            if (key.isNullAt(i)) {
                return true;
            }
        }
        return false;
    }

    private static Map<Row, Long> read(MapState<Row, Long> state) {
        Map<Row, Long> rows = new HashMap<>();
        // one scan of the key's rows (exists() would be a scan of its own), none when there are none
        scala.collection.Iterator<scala.Tuple2<Row, Long>> entries = state.iterator();
        while (entries.hasNext()) {
            scala.Tuple2<Row, Long> entry = entries.next();
            rows.put(entry._1(), entry._2());
        }
        return rows;
    }

    /** A side kept as its one row: that row once, or none. */
    private static Map<Row, Long> read(ValueState<Row> state) {
        Map<Row, Long> rows = new HashMap<>();
        Row row = state.get(); // null: none (exists() would be a read of its own)
        if (row != null) {
            rows.put(row, 1L);
        }
        return rows;
    }

    /** The side's rows after {@code delta} ({@code before}: all of them before it). */
    private static Map<Row, Long> after(Map<Row, Long> before, Map<Row, Long> delta, String side) {
        Map<Row, Long> after = new HashMap<>(before);
        for (Map.Entry<Row, Long> change : delta.entrySet()) {
            long has = before.getOrDefault(change.getKey(), 0L) + change.getValue(); // delta has each row once
            if (has < 0) {
                throw new IllegalStateException("the " + side + " side of an incremental join was sent the retraction"
                        + " of a row it did not have");
            }
            if (has == 0) {
                after.remove(change.getKey());
            } else {
                after.put(change.getKey(), has);
            }
        }
        return after;
    }

    /** {@link #after}, written to the state of a side kept as its rows with their counts. */
    private static Map<Row, Long> apply(MapState<Row, Long> state, Map<Row, Long> before, Map<Row, Long> delta,
            String side) {
        Map<Row, Long> after = after(before, delta, side);
        for (Row row : delta.keySet()) {
            Long has = after.get(row);
            if (has == null) {
                state.removeKey(row);
            } else {
                state.updateValue(row, has);
            }
        }
        return after;
    }

    /** {@link #after}, written to the state of a side kept as its one row (written only when it changed). */
    private static Map<Row, Long> apply(ValueState<Row> state, Map<Row, Long> before, Map<Row, Long> delta,
            String side) {
        if (delta.isEmpty()) {
            return before;
        }
        Map<Row, Long> after = after(before, delta, side);
        if (after.isEmpty()) {
            if (!before.isEmpty()) {
                state.clear();
            }
            return after;
        }
        Map.Entry<Row, Long> only = after.entrySet().iterator().next();
        if (after.size() > 1 || only.getValue() != 1L) {
            throw new IllegalStateException("the " + side + " side of an incremental join, whose input has at most one"
                    + " row per join key, was sent " + total(after) + " rows for one key");
        }
        if (!before.containsKey(only.getKey())) {
            state.update(only.getKey());
        }
        return after;
    }

    private static long total(Map<Row, Long> rows) {
        long n = 0;
        for (long w : rows.values()) {
            n += w;
        }
        return n;
    }

    private Row pair(long weight, Row l, Row r) {
        Object[] values = new Object[leftSchema.size() + rightSchema.size()];
        for (int i = 0; i < leftSchema.size(); i++) {
            values[i] = l == null ? null : l.get(i);
        }
        for (int i = 0; i < rightSchema.size(); i++) {
            values[leftSchema.size() + i] = r == null ? null : r.get(i);
        }
        return Weighted.of(Math.toIntExact(weight), values);
    }
}
