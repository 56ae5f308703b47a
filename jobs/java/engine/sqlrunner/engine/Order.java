package sqlrunner.engine;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.Comparator;

import org.apache.spark.sql.Row;

/** Orders as Spark SQL orders: values of one type (for MIN and MAX), and the changes to one key. */
final class Order {
    private Order() {}

    /** The order of two changes to one key by their place in their source: (place, position, order), nulls first. */
    static int compareChanges(Row a, Row b) {
        int c = NULLS_FIRST.compare(a.isNullAt(UpsertNormaliser.PLACE) ? null : a.getString(UpsertNormaliser.PLACE),
                b.isNullAt(UpsertNormaliser.PLACE) ? null : b.getString(UpsertNormaliser.PLACE));
        if (c != 0) {
            return c;
        }
        c = NULLS_FIRST.compare(a.isNullAt(UpsertNormaliser.POSITION) ? null : a.getLong(UpsertNormaliser.POSITION),
                b.isNullAt(UpsertNormaliser.POSITION) ? null : b.getLong(UpsertNormaliser.POSITION));
        if (c != 0) {
            return c;
        }
        return Long.compare(a.getLong(UpsertNormaliser.ORDER), b.getLong(UpsertNormaliser.ORDER));
    }

    private static final Comparator<Object> NULLS_FIRST = Comparator.nullsFirst(Order::compareValues);

    /**
     * Two non-null values of one type, ordered as Spark orders them: strings by their UTF-8 bytes, doubles and
     * floats with NaN above every number and -0.0 equal to 0.0, the rest by their natural order.
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static int compareValues(Object a, Object b) {
        if (a instanceof String) {
            return compareUtf8((String) a, (String) b);
        }
        if (a instanceof Double) {
            return compareDoubles((Double) a, (Double) b);
        }
        if (a instanceof Float) {
            return compareDoubles(((Float) a).doubleValue(), ((Float) b).doubleValue());
        }
        if (a instanceof BigDecimal) {
            return ((BigDecimal) a).compareTo((BigDecimal) b);
        }
        if (a instanceof byte[]) {
            return java.util.Arrays.compareUnsigned((byte[]) a, (byte[]) b);
        }
        return ((Comparable) a).compareTo(b);
    }

    private static int compareDoubles(double a, double b) {
        boolean nanA = Double.isNaN(a), nanB = Double.isNaN(b);
        if (nanA || nanB) {
            return nanA == nanB ? 0 : (nanA ? 1 : -1);
        }
        return a == b ? 0 : (a < b ? -1 : 1);
    }

    private static int compareUtf8(String a, String b) {
        return java.util.Arrays.compareUnsigned(a.getBytes(StandardCharsets.UTF_8), b.getBytes(StandardCharsets.UTF_8));
    }
}
