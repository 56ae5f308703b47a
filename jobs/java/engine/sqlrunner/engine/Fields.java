package sqlrunner.engine;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/** The key an incremental operator groups its input by: the input row's fields at the given positions. */
public final class Fields implements MapFunction<Row, Row> {
    private static final long serialVersionUID = 1L;
    private final int[] positions;

    public Fields(int[] positions) {
        this.positions = positions.clone();
    }

    @Override
    public Row call(Row row) {
        Object[] values = new Object[positions.length];
        for (int i = 0; i < positions.length; i++) {
            values[i] = row.get(positions[i]);
        }
        return RowFactory.create(values);
    }
}
