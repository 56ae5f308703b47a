package sqlrunner.engine;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
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
 * rows are not kept, and an outer join's preserved side passes them on padded. Output rows: {@code [weight int,
 * <left's columns>..., <right's columns>...]}. Conditions of the ON clause beyond the keys are applied after this
 * operator for an inner join; the planner does not give it an outer join that has any.
 */
public final class EquiJoin extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;
    static final int SIDE = 0, WEIGHT = 1, LEFT = 2, RIGHT = 3;

    private final StructType leftSchema, rightSchema;
    private final boolean keepLeft, keepRight; // the left (right) rows without partner are emitted padded

    private transient MapState<Row, Long> left, right;

    /** @param joinType inner, left, right or full */
    public EquiJoin(StructType leftSchema, StructType rightSchema, String joinType) {
        this.leftSchema = leftSchema;
        this.rightSchema = rightSchema;
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
        left = getHandle().getMapState("left", Encoders.row(leftSchema), Encoders.LONG(), TTLConfig.NONE());
        right = getHandle().getMapState("right", Encoders.row(rightSchema), Encoders.LONG(), TTLConfig.NONE());
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(Row key, scala.collection.Iterator<Row> rows, TimerValues timers) {
        Map<Row, Long> deltaLeft = new HashMap<>(), deltaRight = new HashMap<>();
        while (rows.hasNext()) {
            Row row = rows.next();
            boolean isLeft = row.getInt(SIDE) == 0;
            Row values = row.getStruct(isLeft ? LEFT : RIGHT);
            (isLeft ? deltaLeft : deltaRight).merge(values, (long) row.getInt(WEIGHT), Long::sum);
        }
        deltaLeft.values().removeIf(w -> w == 0);
        deltaRight.values().removeIf(w -> w == 0);
        List<Row> out = new ArrayList<>();
        if (anyNull(key)) { // matches nothing: the preserved side's rows go on padded, nothing is kept
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
        Map<Row, Long> oldLeft = read(left), oldRight = read(right);
        long leftBefore = total(oldLeft), rightBefore = total(oldRight);
        // ΔL ⋈ R(before)
        deltaLeft.forEach((l, wl) -> oldRight.forEach((r, wr) -> out.add(pair(wl * wr, l, r))));
        Map<Row, Long> newLeft = apply(left, oldLeft, deltaLeft, "left");
        // L(after) ⋈ ΔR
        deltaRight.forEach((r, wr) -> newLeft.forEach((l, wl) -> out.add(pair(wl * wr, l, r))));
        Map<Row, Long> newRight = apply(right, oldRight, deltaRight, "right");
        long leftAfter = total(newLeft), rightAfter = total(newRight);
        if (keepLeft) {
            padded(out, oldLeft, rightBefore == 0, newLeft, rightAfter == 0, true);
        }
        if (keepRight) {
            padded(out, oldRight, leftBefore == 0, newRight, leftAfter == 0, false);
        }
        return CollectionConverters.asScala(out.iterator());
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

    /** The side's rows after {@code delta} ({@code before}: all of them before it), written to its state. */
    private static Map<Row, Long> apply(MapState<Row, Long> state, Map<Row, Long> before, Map<Row, Long> delta,
            String side) {
        Map<Row, Long> after = new HashMap<>(before);
        for (Map.Entry<Row, Long> change : delta.entrySet()) {
            long has = before.getOrDefault(change.getKey(), 0L) + change.getValue();
            if (has < 0) {
                throw new IllegalStateException("the " + side + " side of an incremental join was sent the retraction"
                        + " of a row it did not have");
            }
            if (has == 0) {
                state.removeKey(change.getKey());
                after.remove(change.getKey());
            } else {
                state.updateValue(change.getKey(), has);
                after.put(change.getKey(), has);
            }
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
