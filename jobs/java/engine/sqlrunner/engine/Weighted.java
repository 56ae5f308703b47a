package sqlrunner.engine;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/** Rows with a weight in front: {@code [weight int, <values>...]}, the form every incremental operator emits. */
final class Weighted {
    private Weighted() {}

    static Row of(int weight, Row values) {
        Object[] out = new Object[values.size() + 1];
        out[0] = weight;
        for (int i = 0; i < values.size(); i++) {
            out[i + 1] = values.get(i);
        }
        return RowFactory.create(out);
    }

    static Row of(int weight, Object[] values) {
        Object[] out = new Object[values.length + 1];
        out[0] = weight;
        System.arraycopy(values, 0, out, 1, values.length);
        return RowFactory.create(out);
    }
}
