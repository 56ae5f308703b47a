package sqlrunner.engine;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
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
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * The aggregates of one group, kept as accumulators that weighted rows add to and take from: each micro-batch's
 * changes to a group become the retraction of the group's previous result row (weight -1) and its new one (+1).
 *
 * <p>Input rows: {@code [weight int, <each aggregate's input>...]}, grouped by the query's grouping values. Output
 * rows: {@code [weight int, <grouping values>..., <each aggregate's slots>...]}; the slots are what the aggregate's
 * value is computed from (by Spark's own expressions, after this operator), per kind:
 *
 * <ul>
 *   <li>{@code count_rows} (COUNT(*)): {@code [unused long, rows long]};
 *   <li>{@code count}: {@code [unused long, non-null values long]};
 *   <li>{@code sum}, {@code avg} over integers: {@code [sum long, non-null values long]}; over decimals:
 *       {@code [sum decimal(38, s), non-null values]}; over floating point: {@code [sum of the finite values double,
 *       non-null values, NaNs long, +Infinities long, -Infinities long, exact sum of the finite values binary]}, so
 *       that taking a NaN or an infinity away gives the sum of what is left, and taking a value away leaves no
 *       rounding behind: the sum is kept exactly (every finite double is a decimal fraction) and the double slot is
 *       it rounded once, so that adding 1e20 and taking it away again leaves the small values' sum, as summing the
 *       rows left would, instead of the 0 a double accumulator is left with;
 *   <li>{@code min}, {@code max}: {@code [the extreme, non-null values]}, the values kept with their counts
 *       (MapState) so that taking the extreme away finds the next one;
 *   <li>{@code count_distinct}: {@code [distinct non-null values long, non-null values long]}, the values kept with
 *       their counts.
 * </ul>
 *
 * <p>A group whose rows all went away emits only its retraction and keeps no state, unless the aggregate is global
 * (no GROUP BY): its one row exists from the first input it is given (a row of weight 0 too, which changes nothing
 * else) and stays, as in SQL, with COUNT 0 and the rest NULL once no row is left. A slot whose values all went away
 * is back to its value of no input, so that a group left as it was emits nothing.
 */
public final class GroupAggregate extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;

    private static final int FLOATING_SLOTS = 6; // a floating point sum's slots (see above)

    private final String[] kinds;
    private final int[] inputs;
    private final DataType[] types;
    private final boolean global;
    private final int[] offsets; // each aggregate's first slot in the accumulator row (after the row count)
    private final StructType accumulatorSchema;

    private transient ValueState<Row> accumulators;
    private transient List<MapState<Row, Long>> values;

    /**
     * @param kinds each aggregate's kind (see above)
     * @param inputs each aggregate's input: its position in the input row (-1 for count_rows)
     * @param types each aggregate's input type (null for count_rows)
     * @param global the aggregate has no GROUP BY
     */
    public GroupAggregate(String[] kinds, int[] inputs, DataType[] types, boolean global) {
        this.kinds = kinds.clone();
        this.inputs = inputs.clone();
        this.types = types.clone();
        this.global = global;
        this.offsets = new int[kinds.length];
        List<StructField> fields = new ArrayList<>();
        fields.add(DataTypes.createStructField("rows", DataTypes.LongType, false));
        for (int i = 0; i < kinds.length; i++) {
            offsets[i] = fields.size();
            for (StructField slot : slots(kinds[i], types[i], i)) {
                fields.add(slot);
            }
        }
        this.accumulatorSchema = DataTypes.createStructType(fields);
    }

    /** The slots of aggregate {@code index}: their names and types, as this operator's output has them too. */
    public static StructField[] slots(String kind, DataType type, int index) {
        String a = "a" + index, b = "n" + index;
        StructField count = DataTypes.createStructField(b, DataTypes.LongType, false);
        switch (kind) {
            case "count_rows":
            case "count":
            case "count_distinct":
                return new StructField[] {DataTypes.createStructField(a, DataTypes.LongType, true), count};
            case "sum":
            case "avg":
                if (floating(type)) {
                    return new StructField[] {
                        DataTypes.createStructField(a, DataTypes.DoubleType, true), count,
                        DataTypes.createStructField("nan" + index, DataTypes.LongType, false),
                        DataTypes.createStructField("pinf" + index, DataTypes.LongType, false),
                        DataTypes.createStructField("ninf" + index, DataTypes.LongType, false),
                        DataTypes.createStructField("x" + index, DataTypes.BinaryType, true)
                    };
                }
                return new StructField[] {DataTypes.createStructField(a, sumType(kind, type), true), count};
            case "min":
            case "max":
                return new StructField[] {DataTypes.createStructField(a, type, true), count};
            default:
                throw new IllegalArgumentException("no incremental aggregate " + kind);
        }
    }

    /**
     * The type a sum is kept in: a decimal's at its scale and the most digits; an integer SUM's as a long (overflow
     * fails, as in ANSI SQL); an integer AVG's exactly, as a decimal (Spark's own AVG sums doubles: it never
     * overflows); a floating point one's as a double.
     */
    static DataType sumType(String kind, DataType type) {
        if (type instanceof DecimalType) {
            return DataTypes.createDecimalType(38, ((DecimalType) type).scale());
        }
        if (floating(type)) {
            return DataTypes.DoubleType;
        }
        return kind.equals("avg") ? DataTypes.createDecimalType(38, 0) : DataTypes.LongType;
    }

    /** The output rows' schema, after their weight: the grouping columns, then every aggregate's slots. */
    public StructType outputSchema(StructType groupSchema) {
        List<StructField> fields = new ArrayList<>();
        fields.add(DataTypes.createStructField("__weight", DataTypes.IntegerType, false));
        fields.addAll(Arrays.asList(groupSchema.fields()));
        fields.addAll(Arrays.asList(accumulatorSchema.fields()).subList(1, accumulatorSchema.size()));
        return DataTypes.createStructType(fields);
    }

    private static boolean floating(DataType type) {
        return DataTypes.DoubleType.equals(type) || DataTypes.FloatType.equals(type);
    }

    private boolean keepsValues(int i) {
        return kinds[i].equals("min") || kinds[i].equals("max") || kinds[i].equals("count_distinct");
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
        accumulators = getHandle().getValueState("accumulators", Encoders.row(accumulatorSchema), TTLConfig.NONE());
        values = new ArrayList<>();
        for (int i = 0; i < kinds.length; i++) {
            if (keepsValues(i)) {
                StructType value = DataTypes.createStructType(new StructField[] {
                    DataTypes.createStructField("v", types[i], false)
                });
                values.add(getHandle().getMapState("values" + i, Encoders.row(value), Encoders.LONG(), TTLConfig.NONE()));
            } else {
                values.add(null);
            }
        }
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(Row key, scala.collection.Iterator<Row> rows, TimerValues timers) {
        // get() is null for a group without state (exists() is a get() of its own: one read of the store, not three)
        Row kept = accumulators.get();
        boolean existed = kept != null; // a group's state is kept while it has rows, a global one's always
        Object[] acc = existed ? toArray(kept) : empty();
        Object[] before = acc.clone();
        // The batch's rows netted first (a row a join gave and took back in the same batch is no change), then
        // the additions before the retractions: no value is taken away before it was added, whatever order the
        // exchange delivered them in. Rows of weight 0 change nothing (a global aggregate's ticks).
        Map<Row, Long> netted = new LinkedHashMap<>();
        while (rows.hasNext()) {
            Row row = rows.next();
            Object[] values = toArray(row);
            values[0] = 0;
            netted.merge(RowFactory.create(values), (long) row.getInt(0), Long::sum);
        }
        for (boolean adding : new boolean[] {true, false}) {
            for (Map.Entry<Row, Long> entry : netted.entrySet()) {
                long weight = entry.getValue();
                if (adding ? weight > 0 : weight < 0) {
                    apply(acc, entry.getKey(), weight);
                }
            }
        }
        long count = (Long) acc[0];
        if (count < 0) {
            throw new IllegalStateException("a group of the incremental aggregate holds " + count
                    + " rows: it was sent the retraction of a row it never had");
        }
        boolean exists = count > 0 || global;
        if (count == 0 && !global) {
            accumulators.clear();
        } else {
            accumulators.update(RowFactory.create(acc));
        }
        if (existed && exists && Arrays.deepEquals(before, acc)) {
            return CollectionConverters.asScala(Collections.<Row>emptyIterator());
        }
        List<Row> out = new ArrayList<>(2);
        if (existed) {
            out.add(Weighted.of(-1, output(key, before)));
        }
        if (exists) {
            out.add(Weighted.of(1, output(key, acc)));
        }
        return CollectionConverters.asScala(out.iterator());
    }

    private void apply(Object[] acc, Row row, long weight) {
        acc[0] = Math.addExact((Long) acc[0], weight);
        for (int i = 0; i < kinds.length; i++) {
            if (kinds[i].equals("count_rows")) {
                acc[offsets[i] + 1] = Math.addExact((Long) acc[offsets[i] + 1], weight);
            } else {
                add(acc, i, row.isNullAt(inputs[i]) ? null : row.get(inputs[i]), weight);
            }
        }
    }

    private Object[] empty() {
        Object[] acc = new Object[accumulatorSchema.size()];
        acc[0] = 0L;
        for (int i = 0; i < kinds.length; i++) {
            int at = offsets[i];
            acc[at + 1] = 0L;
            if (kinds[i].equals("count_distinct")) {
                acc[at] = 0L;
            }
            if ((kinds[i].equals("sum") || kinds[i].equals("avg")) && floating(types[i])) {
                acc[at] = 0.0d;
                acc[at + 2] = 0L;
                acc[at + 3] = 0L;
                acc[at + 4] = 0L;
            }
        }
        return acc;
    }

    private static Object[] toArray(Row row) {
        Object[] out = new Object[row.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = row.get(i);
        }
        return out;
    }

    private static Object[] output(Row key, Object[] acc) {
        Object[] out = new Object[key.size() + acc.length - 1];
        for (int i = 0; i < key.size(); i++) {
            out[i] = key.get(i);
        }
        System.arraycopy(acc, 1, out, key.size(), acc.length - 1);
        return out;
    }

    private void add(Object[] acc, int i, Object value, long weight) {
        if (value == null) {
            return; // SQL's aggregates skip NULL
        }
        int at = offsets[i];
        acc[at + 1] = Math.addExact((Long) acc[at + 1], weight);
        if ((Long) acc[at + 1] == 0 && (kinds[i].equals("sum") || kinds[i].equals("avg"))) {
            Object[] none = empty();
            System.arraycopy(none, at, acc, at, floating(types[i]) ? FLOATING_SLOTS : 2); // nothing left over
            return;
        }
        switch (kinds[i]) {
            case "count":
                return;
            case "sum":
            case "avg":
                addToSum(acc, at, value, weight, sumType(kinds[i], types[i]));
                return;
            case "min":
            case "max":
            case "count_distinct":
                addToValues(acc, i, at, value, weight);
                return;
            default:
                throw new IllegalArgumentException("no incremental aggregate " + kinds[i]);
        }
    }

    private static void addToSum(Object[] acc, int at, Object value, long weight, DataType type) {
        if (type instanceof DecimalType) {
            BigDecimal sum = acc[at] == null ? BigDecimal.ZERO : (BigDecimal) acc[at];
            BigDecimal exact = value instanceof BigDecimal ? (BigDecimal) value : BigDecimal.valueOf(((Number) value).longValue());
            acc[at] = sum.add(exact.multiply(BigDecimal.valueOf(weight)));
        } else if (floating(type)) {
            double v = ((Number) value).doubleValue();
            if (Double.isNaN(v)) {
                acc[at + 2] = (Long) acc[at + 2] + weight;
            } else if (v == Double.POSITIVE_INFINITY) {
                acc[at + 3] = (Long) acc[at + 3] + weight;
            } else if (v == Double.NEGATIVE_INFINITY) {
                acc[at + 4] = (Long) acc[at + 4] + weight;
            } else {
                BigDecimal exact = exact(acc[at + 5]).add(new BigDecimal(v).multiply(BigDecimal.valueOf(weight)));
                acc[at + 5] = exactBytes(exact);
                acc[at] = exact.doubleValue(); // rounded once, from the exact sum
            }
        } else {
            long sum = acc[at] == null ? 0L : (Long) acc[at];
            acc[at] = Math.addExact(sum, Math.multiplyExact(((Number) value).longValue(), weight));
        }
    }

    /** The exact sum a floating point sum's last slot holds (null: none yet): its scale, then its unscaled digits. */
    private static BigDecimal exact(Object slot) {
        if (slot == null) {
            return BigDecimal.ZERO;
        }
        ByteBuffer bytes = ByteBuffer.wrap((byte[]) slot);
        int scale = bytes.getInt();
        byte[] unscaled = new byte[bytes.remaining()];
        bytes.get(unscaled);
        return new BigDecimal(new BigInteger(unscaled), scale);
    }

    private static byte[] exactBytes(BigDecimal exact) {
        BigDecimal kept = exact.signum() == 0 ? BigDecimal.ZERO : exact.stripTrailingZeros();
        byte[] unscaled = kept.unscaledValue().toByteArray();
        return ByteBuffer.allocate(4 + unscaled.length).putInt(kept.scale()).put(unscaled).array();
    }

    private void addToValues(Object[] acc, int i, int at, Object value, long weight) {
        MapState<Row, Long> kept = values.get(i);
        Row entry = RowFactory.create(value);
        Long had = kept.getValue(entry); // null: not there (containsKey is a getValue of its own)
        long before = had == null ? 0L : had;
        long after = before + weight;
        if (after < 0) {
            throw new IllegalStateException("an incremental " + kinds[i] + " was sent the retraction of a value it never had");
        }
        if (after == 0) {
            kept.removeKey(entry);
        } else {
            kept.updateValue(entry, after);
        }
        if (kinds[i].equals("count_distinct")) {
            if (before == 0 && after > 0) {
                acc[at] = (Long) acc[at] + 1;
            } else if (before > 0 && after == 0) {
                acc[at] = (Long) acc[at] - 1;
            }
            return;
        }
        int sign = kinds[i].equals("min") ? -1 : 1; // > 0: a value that takes the extreme's place
        if (after > 0 && (acc[at] == null || sign * Order.compareValues(value, acc[at]) > 0)) {
            acc[at] = value;
        } else if (after == 0 && acc[at] != null && Order.compareValues(value, acc[at]) == 0) {
            Object extreme = null;
            scala.collection.Iterator<Row> rest = kept.keys();
            while (rest.hasNext()) {
                Object candidate = rest.next().get(0);
                if (extreme == null || sign * Order.compareValues(candidate, extreme) > 0) {
                    extreme = candidate;
                }
            }
            acc[at] = extreme;
        }
    }
}
