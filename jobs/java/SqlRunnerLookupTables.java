import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.catalyst.expressions.Alias$;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Cast$;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.planning.ExtractEquiJoinKeys;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.LeftOuter$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.MapInArrow;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.trees.TreeNode;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.columnar.InMemoryRelation;
import scala.jdk.javaapi.CollectionConverters;

public class SqlRunnerLookupTables extends org.apache.spark.sql.catalyst.rules.Rule {
    // FULL: marker RDD id -> the snapshot (an InMemoryRelation), or a String: why no snapshot may be used
    private final ConcurrentHashMap markers = new ConcurrentHashMap();
    // PARTIAL: marker RDD id -> {look-up function for JOIN, for LEFT JOIN, the table's name}
    private final ConcurrentHashMap partials = new ConcurrentHashMap();

    public TreeNode apply(TreeNode plan) {
        LogicalPlan joined = (LogicalPlan) plan;
        if (!partials.isEmpty()) {
            joined = (LogicalPlan) joined.transformUp(new SqlRunnerLookupJoin(partials));
            LogicalRDD left = SqlRunnerLookupJoin.find(joined, partials);
            if (left != null) {
                Object[] entry = (Object[]) partials.get(Integer.valueOf(left.rdd().id()));
                throw new IllegalStateException("PARTIAL lookup table " + entry[2] + " is read outside a JOIN or "
                    + "LEFT JOIN that follows the stream (FROM stream JOIN table ON table.key = ...)");
            }
        }
        return joined.transformUp(new SqlRunnerLookupSwap(markers));
    }

    public String ruleName() {
        return "SqlRunnerLookupTables";
    }

    public void put(int marker, Object snapshotOrReason) {
        markers.put(Integer.valueOf(marker), snapshotOrReason);
    }

    public void putPartial(int marker, Object inner, Object outer, String table) {
        partials.put(Integer.valueOf(marker), new Object[] { inner, outer, table });
    }

    public void forgetPartial(int marker) {
        partials.remove(Integer.valueOf(marker));
    }
}

class SqlRunnerLookupSwap extends scala.runtime.AbstractPartialFunction {
    private final ConcurrentHashMap markers;

    SqlRunnerLookupSwap(ConcurrentHashMap markers) {
        this.markers = markers;
    }

    public boolean isDefinedAt(Object node) {
        return node instanceof LogicalRDD && markers.containsKey(Integer.valueOf(((LogicalRDD) node).rdd().id()));
    }

    public Object applyOrElse(Object node, scala.Function1 otherwise) {
        if (!(node instanceof LogicalRDD)) {
            return otherwise.apply(node);
        }
        LogicalRDD marker = (LogicalRDD) node;
        Object found = markers.get(Integer.valueOf(marker.rdd().id()));
        if (found == null) {
            return otherwise.apply(node);
        }
        if (found instanceof String) {
            throw new IllegalStateException((String) found);
        }
        return ((InMemoryRelation) found).withOutput(marker.output());
    }
}

// A JOIN or LEFT JOIN of a stream with a PARTIAL lookup table becomes the stream's rows mapped, batch by batch,
// through a Python function that looks their keys up (jobs/lookup/partial.py): no relation of the table at all.
class SqlRunnerLookupJoin extends scala.runtime.AbstractPartialFunction {
    static final String KEY = "__sql_runner_key:";
    private final ConcurrentHashMap partials;

    SqlRunnerLookupJoin(ConcurrentHashMap partials) {
        this.partials = partials;
    }

    static LogicalRDD find(LogicalPlan plan, ConcurrentHashMap partials) {
        if (plan instanceof LogicalRDD && partials.containsKey(Integer.valueOf(((LogicalRDD) plan).rdd().id()))) {
            return (LogicalRDD) plan;
        }
        scala.collection.Iterator children = plan.children().iterator();
        while (children.hasNext()) {
            LogicalRDD found = find((LogicalPlan) children.next(), partials);
            if (found != null) {
                return found;
            }
        }
        return null;
    }

    static boolean outputOf(Expression expression, LogicalPlan plan) {
        if (!(expression instanceof AttributeReference)) {
            return false;
        }
        scala.collection.Iterator attributes = plan.output().iterator();
        while (attributes.hasNext()) {
            if (((Attribute) attributes.next()).exprId().equals(((AttributeReference) expression).exprId())) {
                return true;
            }
        }
        return false;
    }

    static scala.collection.immutable.Seq seq(List items) {
        return CollectionConverters.asScala(items).toList();
    }

    static List list(scala.collection.Seq items) {
        return new ArrayList(CollectionConverters.asJava(items));
    }

    public boolean isDefinedAt(Object node) {
        return node instanceof Join;
    }

    public Object applyOrElse(Object node, scala.Function1 otherwise) {
        if (!(node instanceof Join)) {
            return otherwise.apply(node);
        }
        Join join = (Join) node;
        LogicalRDD marker = find(join.right(), partials);
        if (marker == null) {
            return otherwise.apply(node);
        }
        Object[] entry = (Object[]) partials.get(Integer.valueOf(marker.rdd().id()));
        String table = (String) entry[2];
        boolean outer;
        if (join.joinType() == Inner$.MODULE$) {
            outer = false;
        } else if (join.joinType() == LeftOuter$.MODULE$) {
            outer = true;
        } else {
            throw new IllegalStateException("PARTIAL lookup table " + table + " is joined with "
                + join.joinType().sql() + "; it takes JOIN or LEFT JOIN, the stream first");
        }
        scala.Option extracted = ExtractEquiJoinKeys.unapply(join);
        List lefts = new ArrayList();
        List rights = new ArrayList();
        Expression other = null;
        if (!extracted.isEmpty()) {
            scala.Tuple8 parts = (scala.Tuple8) extracted.get();
            lefts = list((scala.collection.Seq) parts._2());
            rights = list((scala.collection.Seq) parts._3());
            scala.Option rest = (scala.Option) parts._4();
            other = rest.isEmpty() ? null : (Expression) rest.get();
        }
        boolean computed = false;
        boolean filtered = false;
        LogicalPlan step = join.right();
        while (step != marker) {
            if (step instanceof Project) {
                scala.collection.Iterator items = ((Project) step).projectList().iterator();
                while (items.hasNext()) {
                    computed = computed || !(items.next() instanceof AttributeReference);
                }
            } else if (step instanceof Filter) {
                // Spark infers "key IS NOT NULL" for the table's side of a join: a look-up implies it
                filtered = filtered || !notNullOnly(((Filter) step).condition(), rights);
            } else {
                throw new IllegalStateException("PARTIAL lookup table " + table + " is joined as "
                    + step.nodeName() + " over it; join the table itself: FROM stream JOIN table ON ...");
            }
            step = (LogicalPlan) step.children().head();
        }
        List keyed = list(join.left().output());
        int keys = 0;
        for (int i = 0; i < rights.size(); i++) {
            Expression right = (Expression) rights.get(i);
            Expression left = (Expression) lefts.get(i);
            if (!outputOf(right, marker)) {
                Expression equal = new EqualTo(left, right);
                other = other == null ? equal : new And(other, equal);
                continue;
            }
            AttributeReference column = (AttributeReference) right;
            Expression cast = (Expression) Cast$.MODULE$.apply(
                left, column.dataType(), scala.Option.empty(), Cast$.MODULE$.apply$default$4());
            String name = KEY + column.name();
            keyed.add((NamedExpression) Alias$.MODULE$.apply(cast, name, NamedExpression$.MODULE$.newExprId(),
                Alias$.MODULE$.apply$default$4(cast, name), Alias$.MODULE$.apply$default$5(cast, name),
                Alias$.MODULE$.apply$default$6(cast, name)));
            keys++;
        }
        if (keys == 0) {
            throw new IllegalStateException("PARTIAL lookup table " + table + " is looked up by key: ON needs "
                + "an equality between a column of the table and the stream, e.g. ON u.id = e.user_id");
        }
        if (outer && (other != null || filtered || computed)) {
            throw new IllegalStateException("LEFT JOIN of PARTIAL lookup table " + table + " takes only equalities "
                + "between its columns and the stream in ON (no other condition, no computed column): put other "
                + "conditions in WHERE, or use JOIN");
        }
        Project input = new Project(seq(keyed), join.left());
        List output = list(join.left().output());
        scala.collection.Iterator columns = marker.output().iterator();
        while (columns.hasNext()) {
            Attribute column = (Attribute) columns.next();
            output.add(outer ? column.withNullability(true) : column);
        }
        PythonUDF template = (PythonUDF) entry[outer ? 1 : 0];
        Expression function = new PythonUDF(template.name(), template.func(), template.dataType(),
            (scala.collection.immutable.Seq) input.output(), template.evalType(), template.udfDeterministic(),
            template.resultId());
        LogicalPlan looked = new MapInArrow(function, seq(output), input, false, scala.Option.empty());
        LogicalPlan rebuilt = rebuild(join.right(), marker, looked, join.left().output(), outer);
        return other == null ? rebuilt : new Filter(other, rebuilt);
    }

    static LogicalPlan rebuild(
            LogicalPlan step, LogicalRDD marker, LogicalPlan looked, scala.collection.Seq left, boolean outer) {
        if (step == marker) {
            return looked;
        }
        LogicalPlan child = rebuild((LogicalPlan) step.children().head(), marker, looked, left, outer);
        if (step instanceof Project) {
            List items = list(left);
            items.addAll(list(((Project) step).projectList()));
            return new Project(seq(items), child);
        }
        if (outer) {
            return child;  // only "key IS NOT NULL": it would drop the rows a LEFT JOIN keeps with NULLs
        }
        return new Filter(((Filter) step).condition(), child);
    }

    static boolean notNullOnly(Expression condition, List keys) {
        if (condition instanceof And) {
            return notNullOnly(((And) condition).left(), keys) && notNullOnly(((And) condition).right(), keys);
        }
        if (!(condition instanceof IsNotNull)) {
            return false;
        }
        Expression tested = ((IsNotNull) condition).child();
        for (int i = 0; i < keys.size(); i++) {
            Expression key = (Expression) keys.get(i);
            if (key instanceof AttributeReference && tested instanceof AttributeReference
                    && ((AttributeReference) key).exprId().equals(((AttributeReference) tested).exprId())) {
                return true;
            }
        }
        return false;
    }
}
