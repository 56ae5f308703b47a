package sqlrunner.engine;

import java.util.Iterator;

import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * Each row with its place in the micro-batch after it: the partition's number in the upper bits, the row's in the
 * partition in the lower ones (as {@code monotonically_increasing_id()}, which a stream may not use). A file's lines
 * are in one partition in line order, so the last of a key's changes in a file is the one numbered highest.
 */
public final class Numbered implements MapPartitionsFunction<Row, Row> {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<Row> call(Iterator<Row> rows) {
        long base = ((long) TaskContext.getPartitionId()) << 33;
        return new Iterator<Row>() {
            private long next = base;

            @Override
            public boolean hasNext() {
                return rows.hasNext();
            }

            @Override
            public Row next() {
                Row row = rows.next();
                Object[] values = new Object[row.size() + 1];
                for (int i = 0; i < row.size(); i++) {
                    values[i] = row.get(i);
                }
                values[row.size()] = next++;
                return RowFactory.create(values);
            }
        };
    }
}
