import org.apache.spark.sql.catalyst.expressions.CurrentBatchTimestamp;
import org.apache.spark.sql.catalyst.expressions.GetArrayItem;
import org.apache.spark.sql.catalyst.expressions.KnownNotNull;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.trees.TreeNode;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;

public class SqlRunnerStableBatchTimestamp extends org.apache.spark.sql.catalyst.rules.Rule {
    public TreeNode apply(TreeNode plan) {
        return ((LogicalPlan) plan).transformAllExpressions(new SqlRunnerBatchTimestampHeld());
    }

    public String ruleName() {
        return "SqlRunnerStableBatchTimestamp";
    }
}

class SqlRunnerBatchTimestampHeld extends scala.runtime.AbstractPartialFunction {
    public boolean isDefinedAt(Object expression) {
        return expression instanceof CurrentBatchTimestamp;
    }

    public Object applyOrElse(Object expression, scala.Function1 otherwise) {
        if (!(expression instanceof CurrentBatchTimestamp)) {
            return otherwise.apply(expression);
        }
        Literal value = ((CurrentBatchTimestamp) expression).toLiteral();
        Literal held = new Literal(
            new GenericArrayData(new Object[] { value.value() }), new ArrayType(value.dataType(), false));
        return new KnownNotNull(new GetArrayItem(held, new Literal(Integer.valueOf(0), DataTypes.IntegerType), false));
    }
}
