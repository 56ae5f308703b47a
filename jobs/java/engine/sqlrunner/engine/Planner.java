package sqlrunner.engine;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.CaseWhen$;
import org.apache.spark.sql.catalyst.expressions.Coalesce;
import org.apache.spark.sql.catalyst.expressions.Contains;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.Cast$;
import org.apache.spark.sql.catalyst.expressions.CreateNamedStruct;
import org.apache.spark.sql.catalyst.expressions.CurrentTimestampLike;
import org.apache.spark.sql.catalyst.expressions.EqualNullSafe;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.In;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.expressions.StartsWith;
import org.apache.spark.sql.catalyst.expressions.EndsWith;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction;
import org.apache.spark.sql.catalyst.expressions.aggregate.Average;
import org.apache.spark.sql.catalyst.expressions.aggregate.Complete$;
import org.apache.spark.sql.catalyst.expressions.aggregate.Count;
import org.apache.spark.sql.catalyst.expressions.aggregate.DeclarativeAggregate;
import org.apache.spark.sql.catalyst.expressions.aggregate.Max;
import org.apache.spark.sql.catalyst.expressions.aggregate.Min;
import org.apache.spark.sql.catalyst.expressions.aggregate.Sum;
import org.apache.spark.sql.catalyst.optimizer.NormalizeNaNAndZero;
import org.apache.spark.sql.catalyst.planning.ExtractEquiJoinKeys$;
import org.apache.spark.sql.catalyst.planning.PhysicalAggregation$;
import org.apache.spark.sql.catalyst.plans.FullOuter$;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.JoinType;
import org.apache.spark.sql.catalyst.plans.LeftOuter$;
import org.apache.spark.sql.catalyst.plans.RightOuter$;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.catalyst.plans.logical.Union;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.Dataset$;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DateType$;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType$;
import org.apache.spark.sql.types.FloatType$;
import org.apache.spark.sql.types.IntegralType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType$;
import org.apache.spark.sql.types.TimestampType$;

import scala.Option;
import scala.Tuple4;
import scala.Tuple8;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A changelog query's plan as a chain of incremental operators over weighted rows: Spark's own optimised plan of the
 * query over the sources' tables, each node given the changes of its input instead of its rows.
 *
 * <ul>
 *   <li>a source table: its weighted rows ({@link UpsertNormaliser}'s output, given by {@link #source});
 *   <li>projections and filters: Spark's own, the weight carried along (a row's change is its own);
 *   <li>UNION ALL: the inputs' changes together;
 *   <li>GROUP BY with COUNT, SUM, AVG, MIN, MAX and COUNT(DISTINCT): {@link GroupAggregate}, each aggregate's value
 *       computed from its slots by the aggregate function's own final expression;
 *   <li>inner and outer joins on equal keys: {@link EquiJoin}, the ON clause's other conditions after it (inner only);
 *   <li>ORDER BY without LIMIT: nothing (a table's rows have no order).
 * </ul>
 *
 * <p>Every translated node has the original node's output attributes (the same expression ids) and a weight in
 * front, so that the node above it keeps its expressions as Spark analysed and optimised them. What the chain does not
 * cover is named by {@link #unsupported}; such a query is recomputed over the tables' rows every micro-batch.
 *
 * <p>Each translated node also says which sets of its columns no two of its rows share (a source's PRIMARY KEY, a
 * GROUP BY's keys; kept through projections that keep those columns, filters, and the joins whose other side has at
 * most one partner per row): a join side with such a set among its join keys has at most one row per join key, and
 * {@link EquiJoin} keeps it as a value. The state layout of checkpoints made before that
 * ({@code runner/core/engine_record.py}: layouts 1 and 2) keeps every side as a map, and so does a plan for them.
 * It also says which sets of its columns have their equal values handed over together by the last stateful operator
 * below it: with a unique set, they let a keyed target take the plan's changes without a copy of its rows
 * ({@link #keyedWithoutState}, layout 4).
 *
 * <p>A join side that is a source's table seen through filters and renames, joined by exactly its PRIMARY KEY, is
 * given the source's changes instead of its weighted rows ({@link EquiJoin}: the side keeps the row the source's
 * normaliser would keep, so the normaliser and its exchange go; layouts 5 and 6).
 */
public final class Planner {
    public static final String WEIGHT = "__weight";

    /** The first state layout whose joins keep a side with at most one row per join key as a value. */
    public static final int VALUE_SIDES = 3;

    /**
     * The first state layout whose plans may give their changes to a keyed target without keeping the target's rows:
     * see {@link #keyedWithoutState}.
     */
    public static final int DIFFERENCE_UNKEPT = 4;

    /**
     * The first state layout whose joins give a side that is a source's table seen through filters and renames,
     * joined by its PRIMARY KEY, that source's changes (no {@link UpsertNormaliser} for it): layout 5 keeps a copy of
     * the target's rows for every plan, as layout 3 does; layout 6 does what layout 4 does besides.
     */
    public static final int SOURCE_SIDES = 5;

    private final SparkSession spark;
    private final int layout;
    private final Map<Integer, Dataset<Row>> sources = new HashMap<>();
    private final Map<Integer, int[]> primaryKeys = new HashMap<>();
    private final Map<Integer, Dataset<Row>> changes = new HashMap<>(); // each source's changes, as a side takes them
    private Dataset<Row> ticks;
    private boolean valueSides; // a join of the plan keeps a side as a value
    private boolean sourceSides; // a join of the plan is given a source's changes on a side
    private Out planned; // the plan's last node, once planned
    private List<Attribute> output; // the query's output columns
    private boolean differenceUnkept; // its changes go to the target without a KeyedDifference
    private boolean targetKnown; // keyedWithoutState was asked since the plan was made

    /** @param layout the state layout the plan keeps (the checkpoint's, as {@code runner/core/engine_record.py} says) */
    public Planner(SparkSession spark, int layout) {
        this.spark = spark;
        this.layout = layout;
    }

    /**
     * The weighted rows ({@code [__weight int, <columns>...]}) of the table whose batch rows are RDD {@code rddId},
     * its changes as {@link UpsertNormaliser} takes them ({@code [delete, place, position, order, <columns>...]}: for
     * a join side that can take them itself), and the positions of its PRIMARY KEY's columns among its columns (at
     * most one row per value of them).
     */
    public void source(int rddId, Dataset<Row> weighted, Dataset<Row> changes, int[] primaryKey) {
        sources.put(rddId, weighted);
        this.changes.put(rddId, changes);
        primaryKeys.put(rddId, primaryKey.clone());
    }

    /**
     * One row {@code [__weight int]} of weight 0 per change the query reads: an aggregate without GROUP BY has its row
     * from the first micro-batch that reads any change, as the recomputed query has.
     */
    public void ticks(Dataset<Row> ticks) {
        this.ticks = ticks;
    }

    /** The incremental chain of {@code optimized} (the query's optimised batch plan): {@code [__weight, <output>...]}. */
    public Dataset<Row> plan(LogicalPlan optimized) {
        String why = unsupported(optimized, optimized);
        if (why != null) {
            throw new IllegalArgumentException("not incremental: " + why);
        }
        valueSides = sourceSides = false;
        Out out = translate(optimized);
        planned = out;
        output = CollectionConverters.asJava(optimized.output());
        targetKnown = false;
        List<NamedExpression> list = new ArrayList<>();
        list.add(alias(out.weight, WEIGHT));
        list.addAll(attributes(optimized.output()));
        return Dataset$.MODULE$.ofRows(spark, new Project(seq(list), out.plan));
    }

    /**
     * The state layout the planned operators keep: the one asked for, but for a plan that keeps a copy of its target's
     * rows (no {@link #keyedWithoutState}), layout 3's state when a join keeps a side as a value and layout 2's when
     * none does, so that a release reading no later layout reads it.
     */
    public int keptLayout() {
        if (!targetKnown) {
            throw new IllegalStateException("keyedWithoutState() first: what the plan keeps depends on its target");
        }
        if (sourceSides) {
            return differenceUnkept ? SOURCE_SIDES + 1 : SOURCE_SIDES;
        }
        if (differenceUnkept) {
            return DIFFERENCE_UNKEPT;
        }
        return Math.min(layout, valueSides ? VALUE_SIDES : VALUE_SIDES - 1);
    }

    /**
     * The positions, among the query's output columns, of the columns by which the rows of each value of the target's
     * key ({@code key}: its columns' positions) come out of the planned operators together, when the plan's changes can
     * go to that target without a {@link KeyedDifference} (null: they cannot). They can when the layout allows it and
     * both hold: the query has at most one row per value of the key (a source's PRIMARY KEY, a GROUP BY's keys or a
     * join's, among the key's columns), so the change of a key's row is the retraction of its old row and the addition
     * of its new one; and those two come out of one group of the last stateful operator (its grouping columns among the
     * key's), so that {@link KeyChanges} finds them side by side instead of a shuffle and a state store of the
     * target's rows bringing them together. A floating point key column does not count: its values are grouped
     * normalised (-0.0 as 0.0), and may not be compared so.
     */
    public int[] keyedWithoutState(int[] key) {
        if (planned == null) {
            throw new IllegalStateException("plan() first");
        }
        differenceUnkept = false;
        targetKnown = true;
        if (layout < DIFFERENCE_UNKEPT || layout == SOURCE_SIDES || key.length == 0) {
            return null;
        }
        Map<ExprId, Integer> columns = new HashMap<>();
        for (int position : key) {
            Attribute column = output.get(position);
            if (floating(column.dataType())) {
                return null;
            }
            columns.put(column.exprId(), position);
        }
        boolean unique = planned.unique.stream().anyMatch(set -> columns.keySet().containsAll(set));
        for (Set<ExprId> together : planned.together) {
            if (unique && columns.keySet().containsAll(together)) {
                differenceUnkept = true;
                return together.stream().mapToInt(columns::get).sorted().toArray();
            }
        }
        return null;
    }

    /**
     * What in the query the incremental chain does not cover, said for its author (null: all of it). {@code analyzed}
     * is the query's analysed plan: the optimiser replaces the current time by the time it ran, which a streaming
     * query must not keep.
     */
    public static String unsupported(LogicalPlan analyzed, LogicalPlan optimized) {
        for (Expression expression : allExpressions(analyzed)) {
            if (expression.find(e -> e instanceof CurrentTimestampLike).isDefined()) {
                return "the current date or time (current_timestamp(), now(), current_date())";
            }
        }
        for (Attribute column : CollectionConverters.asJava(optimized.output())) {
            if (containsBinary(column.dataType())) { // the target's rows are compared by value in Java
                return "a result with a BINARY column (" + column.name() + ")";
            }
        }
        return check(optimized);
    }

    private static String check(LogicalPlan node) {
        if (node instanceof LogicalRDD) {
            return null;
        }
        for (Expression expression : CollectionConverters.asJava(node.expressions())) {
            if (SubqueryExpression.hasSubquery(expression)) {
                return "a subquery in an expression";
            }
            if (!expression.deterministic()) {
                return "a nondeterministic expression (" + expression.sql() + ")";
            }
        }
        if (node instanceof Project || node instanceof Filter || node instanceof Sort) {
            return check(node.children().head());
        }
        if (node instanceof Union) {
            Union union = (Union) node;
            if (union.byName() || union.allowMissingCol()) {
                return "UNION BY NAME";
            }
            return checkChildren(node);
        }
        if (node instanceof Aggregate) {
            Option<Tuple4<scala.collection.immutable.Seq<NamedExpression>, scala.collection.immutable.Seq<AggregateExpression>,
                    scala.collection.immutable.Seq<NamedExpression>, LogicalPlan>> parts = PhysicalAggregation$.MODULE$.unapply(node);
            if (parts.isEmpty()) {
                return "this aggregation";
            }
            String below = check(parts.get()._4()); // what is below first: several DISTINCTs make an Expand there
            if (below != null) {
                return below;
            }
            for (NamedExpression grouping : CollectionConverters.asJava(parts.get()._1())) {
                String why = keyType(((Expression) grouping).dataType(), "a GROUP BY value");
                if (why != null) {
                    return why;
                }
            }
            for (AggregateExpression aggregate : CollectionConverters.asJava(parts.get()._2())) {
                String why = aggregateKind(aggregate) == null ? "the aggregate " + aggregate.sql() : null;
                if (why != null) {
                    return why;
                }
            }
            return null;
        }
        if (node instanceof Join) {
            Join join = (Join) node;
            Option<Tuple8<JoinType, scala.collection.immutable.Seq<Expression>, scala.collection.immutable.Seq<Expression>,
                    Option<Expression>, Option<Expression>, LogicalPlan, LogicalPlan, JoinHint>> parts =
                    ExtractEquiJoinKeys$.MODULE$.unapply(join);
            String kind = joinKind(join.joinType());
            if (kind == null) {
                return "a " + join.joinType().sql() + " join (IN, NOT IN or EXISTS with a subquery, INTERSECT, EXCEPT)";
            }
            if (parts.isEmpty()) {
                return "a join without an equality between its two sides (a cross join, or one on other conditions)";
            }
            if (!kind.equals("inner") && parts.get()._4().isDefined()) {
                return "an outer join whose ON clause has conditions besides equalities between its sides ("
                        + parts.get()._4().get().sql() + ")";
            }
            for (Expression key : CollectionConverters.asJava(parts.get()._2())) {
                String why = keyType(key.dataType(), "a join key");
                if (why != null) {
                    return why;
                }
            }
            for (LogicalPlan side : new LogicalPlan[] {join.left(), join.right()}) {
                for (Attribute column : CollectionConverters.asJava(side.output())) {
                    if (containsBinary(column.dataType())) {
                        return "a join of rows with a BINARY column (" + column.name() + ")";
                    }
                }
            }
            return checkChildren(node);
        }
        return describe(node);
    }

    private static String checkChildren(LogicalPlan node) {
        for (LogicalPlan child : CollectionConverters.asJava(node.children())) {
            String why = check(child);
            if (why != null) {
                return why;
            }
        }
        return null;
    }

    private static String describe(LogicalPlan node) {
        switch (node.nodeName()) {
            case "Window": return "a window function (OVER)";
            case "Expand": return "several COUNT(DISTINCT ...) of different values, GROUPING SETS, ROLLUP or CUBE";
            case "Generate": return "a generator (EXPLODE, INLINE, or INTERSECT ALL / EXCEPT ALL)";
            case "GlobalLimit":
            case "LocalLimit":
            case "Offset":
            case "Tail": return "LIMIT or OFFSET";
            case "LocalRelation":
            case "OneRowRelation":
            case "Range": return "rows not read from a table (VALUES, SELECT without FROM, range())";
            default: return "a " + node.nodeName() + " step";
        }
    }

    /** A value the incremental operators group or join by must compare as SQL compares it. */
    private static String keyType(DataType type, String what) {
        if (containsBinary(type)) {
            return what + " of type BINARY";
        }
        if (type instanceof ArrayType || type instanceof MapType || type instanceof StructType) {
            return what + " of type " + type.sql();
        }
        if (type instanceof StringType && !((StringType) type).supportsBinaryEquality()) {
            return what + " with a collation (" + type.sql() + ")";
        }
        return null;
    }

    private static boolean containsBinary(DataType type) {
        return type.existsRecursively(t -> t instanceof org.apache.spark.sql.types.BinaryType);
    }

    private static String joinKind(JoinType type) {
        if (type == Inner$.MODULE$) {
            return "inner";
        }
        if (type == LeftOuter$.MODULE$) {
            return "left";
        }
        if (type == RightOuter$.MODULE$) {
            return "right";
        }
        if (type == FullOuter$.MODULE$) {
            return "full";
        }
        return null;
    }

    /** The kind of {@link GroupAggregate} accumulator that computes {@code aggregate}, or null when none does. */
    static String aggregateKind(AggregateExpression aggregate) {
        if (aggregate.filter().isDefined() || aggregate.mode() != Complete$.MODULE$) {
            return null;
        }
        AggregateFunction function = aggregate.aggregateFunction();
        List<Expression> inputs = CollectionConverters.asJava(function.children());
        if (function instanceof Count) {
            if (inputs.size() != 1) {
                return null;
            }
            if (aggregate.isDistinct()) {
                return keyType(inputs.get(0).dataType(), "") == null ? "count_distinct" : null;
            }
            return inputs.get(0).nullable() ? "count" : "count_rows";
        }
        if (aggregate.isDistinct() && !(function instanceof Min || function instanceof Max)) {
            return null; // SUM(DISTINCT ...), AVG(DISTINCT ...)
        }
        if (function instanceof Sum || function instanceof Average) {
            DataType type = inputs.get(0).dataType();
            boolean numeric = type instanceof IntegralType || type instanceof DecimalType
                    || type == DoubleType$.MODULE$ || type == FloatType$.MODULE$;
            return numeric ? (function instanceof Sum ? "sum" : "avg") : null;
        }
        if (function instanceof Min || function instanceof Max) {
            DataType type = inputs.get(0).dataType();
            boolean simple = type instanceof IntegralType || type instanceof DecimalType || type == DoubleType$.MODULE$
                    || type == FloatType$.MODULE$ || type == BooleanType$.MODULE$ || type == DateType$.MODULE$
                    || type == TimestampType$.MODULE$ || type == TimestampNTZType$.MODULE$
                    || (type instanceof StringType && ((StringType) type).supportsBinaryEquality());
            return simple ? (function instanceof Min ? "min" : "max") : null;
        }
        return null;
    }

    // ---- translation: every node's output attributes, and a weight ----

    private static final class Out {
        final LogicalPlan plan;
        final Attribute weight;
        final List<Set<ExprId>> unique; // sets of the node's output columns no two of its rows share
        // sets of the node's output columns whose equal values come out of one group of the last stateful operator
        // below, one after the other (it hands over a group's rows before the next group's; filters and projections
        // keep their order): a micro-batch's changes to those values are together in one partition
        final List<Set<ExprId>> together;

        Out(LogicalPlan plan, Attribute weight, List<Set<ExprId>> unique, List<Set<ExprId>> together) {
            this.plan = plan;
            this.weight = weight;
            this.unique = unique;
            this.together = together;
        }
    }

    /** The sets of {@code unique} whose every column {@code projected} keeps (as itself, or renamed). */
    private static List<Set<ExprId>> projected(List<Set<ExprId>> unique, List<NamedExpression> projected) {
        Map<ExprId, ExprId> kept = new HashMap<>();
        for (NamedExpression expression : projected) {
            if (expression instanceof Attribute) {
                kept.putIfAbsent(expression.exprId(), expression.exprId());
            } else if (expression instanceof Alias && ((Alias) expression).child() instanceof Attribute) {
                kept.putIfAbsent(((Attribute) ((Alias) expression).child()).exprId(), expression.exprId());
            }
        }
        List<Set<ExprId>> out = new ArrayList<>();
        for (Set<ExprId> columns : unique) {
            Set<ExprId> renamed = new HashSet<>();
            for (ExprId column : columns) {
                if (kept.containsKey(column)) {
                    renamed.add(kept.get(column));
                }
            }
            if (renamed.size() == columns.size()) {
                out.add(renamed);
            }
        }
        return out;
    }

    /**
     * A join side has at most one row per value of its join {@code keys}: one of its unique sets is among them.
     * Floating point keys do not count: the join compares them normalised (-0.0 as 0.0), its input may not have.
     */
    private static boolean oneRowPerKey(Out side, List<Expression> keys) {
        Set<ExprId> columns = new HashSet<>();
        for (Expression key : keys) {
            if (key instanceof Attribute && !floating(key.dataType())) {
                columns.add(((Attribute) key).exprId());
            }
        }
        for (Set<ExprId> unique : side.unique) {
            if (columns.containsAll(unique)) {
                return true;
            }
        }
        return false;
    }

    private Out translate(LogicalPlan node) {
        if (node instanceof LogicalRDD) {
            return leaf((LogicalRDD) node);
        }
        if (node instanceof Project) {
            Out child = translate(node.children().head());
            List<NamedExpression> list = new ArrayList<>();
            list.add(child.weight);
            list.addAll(CollectionConverters.asJava(((Project) node).projectList()));
            List<NamedExpression> projectList = CollectionConverters.asJava(((Project) node).projectList());
            return new Out(new Project(seq(list), child.plan), child.weight, projected(child.unique, projectList),
                    projected(child.together, projectList));
        }
        if (node instanceof Filter) {
            Out child = translate(node.children().head());
            return new Out(new Filter(((Filter) node).condition(), child.plan), child.weight, child.unique,
                    child.together);
        }
        if (node instanceof Sort) {
            return translate(node.children().head());
        }
        if (node instanceof Union) {
            return union((Union) node);
        }
        if (node instanceof Aggregate) {
            return aggregate(node);
        }
        if (node instanceof Join) {
            return join((Join) node);
        }
        throw new IllegalArgumentException("not incremental: " + describe(node));
    }

    private Out leaf(LogicalRDD node) {
        Dataset<Row> weighted = sources.get(node.rdd().id());
        if (weighted == null) {
            throw new IllegalArgumentException("no changes given for the table of " + node.simpleString(5));
        }
        LogicalPlan plan = weighted.logicalPlan();
        List<Attribute> given = CollectionConverters.asJava(plan.output());
        List<Attribute> wanted = CollectionConverters.asJava(node.output());
        List<NamedExpression> list = new ArrayList<>();
        list.add(given.get(0));
        for (int i = 0; i < wanted.size(); i++) {
            list.add(restore(given.get(i + 1), wanted.get(i)));
        }
        Set<ExprId> key = new HashSet<>();
        for (int column : primaryKeys.get(node.rdd().id())) {
            key.add(wanted.get(column).exprId());
        }
        return new Out(new Project(seq(list), plan), given.get(0), List.of(key), List.of(key)); // grouped by its key
    }

    private Out union(Union node) {
        List<LogicalPlan> children = new ArrayList<>();
        Attribute weight = null;
        for (LogicalPlan child : CollectionConverters.asJava(node.children())) {
            Out out = translate(child);
            List<NamedExpression> list = new ArrayList<>();
            list.add(out.weight);
            list.addAll(attributes(child.output()));
            children.add(new Project(seq(list), out.plan));
            weight = weight == null ? out.weight : weight;
        }
        return new Out(new Union(seq(children), false, false), weight, List.of(), List.of());
    }

    private Out aggregate(LogicalPlan node) {
        Tuple4<scala.collection.immutable.Seq<NamedExpression>, scala.collection.immutable.Seq<AggregateExpression>,
                scala.collection.immutable.Seq<NamedExpression>, LogicalPlan> parts =
                PhysicalAggregation$.MODULE$.unapply(node).get();
        List<NamedExpression> groupings = CollectionConverters.asJava(parts._1());
        List<AggregateExpression> aggregates = CollectionConverters.asJava(parts._2());
        Out child = translate(parts._4());

        // [weight, grouping values, each aggregate's input]
        List<NamedExpression> prepared = new ArrayList<>();
        prepared.add(alias(child.weight, WEIGHT));
        for (int i = 0; i < groupings.size(); i++) {
            NamedExpression grouping = groupings.get(i);
            Expression value = grouping instanceof Alias ? ((Alias) grouping).child() : (Expression) grouping;
            prepared.add(alias(normalised(value), "__g" + i));
        }
        String[] kinds = new String[aggregates.size()];
        int[] inputs = new int[aggregates.size()];
        DataType[] types = new DataType[aggregates.size()];
        for (int j = 0; j < aggregates.size(); j++) {
            kinds[j] = aggregateKind(aggregates.get(j));
            if (kinds[j].equals("count_rows")) {
                inputs[j] = -1;
                continue;
            }
            Expression input = aggregates.get(j).aggregateFunction().children().head();
            inputs[j] = prepared.size();
            types[j] = input.dataType();
            prepared.add(alias(kinds[j].equals("count_distinct") ? normalised(input) : input, "__in" + j));
        }
        boolean global = groupings.isEmpty();
        Literal one = Literal.create(0, DataTypes.IntegerType);
        if (global) {
            prepared.add(alias(one, "__global")); // a stateful operator groups by something: the one group
        }
        LogicalPlan input = new Project(seq(prepared), child.plan);
        if (global && ticks != null) {
            // the row of no input appears with the first micro-batch that reads a change, as when recomputed
            List<NamedExpression> tick = new ArrayList<>();
            List<Attribute> tickColumns = CollectionConverters.asJava(ticks.logicalPlan().output());
            tick.add(alias(tickColumns.get(0), WEIGHT));
            for (int i = 1; i < prepared.size() - 1; i++) {
                tick.add(alias(Literal.create(null, ((Expression) prepared.get(i)).dataType()), prepared.get(i).name()));
            }
            tick.add(alias(one, "__global"));
            input = new Union(seq(List.of(input, new Project(seq(tick), ticks.logicalPlan()))), false, false);
        }
        Dataset<Row> rows = Dataset$.MODULE$.ofRows(spark, input);
        int[] key = new int[global ? 1 : groupings.size()];
        List<StructField> keyFields = new ArrayList<>();
        for (int i = 0; i < key.length; i++) {
            key[i] = global ? prepared.size() - 1 : i + 1;
            keyFields.add(rows.schema().fields()[key[i]]);
        }
        StructType keySchema = DataTypes.createStructType(keyFields);
        GroupAggregate processor = new GroupAggregate(kinds, inputs, types, global);
        Dataset<Row> aggregated = transform(rows, key, keySchema, processor, processor.outputSchema(keySchema));
        LogicalPlan plan = aggregated.logicalPlan();
        Map<String, Attribute> slots = new HashMap<>();
        for (Attribute attribute : CollectionConverters.asJava(plan.output())) {
            slots.put(attribute.name(), attribute);
        }

        // [weight, grouping attributes, each aggregate's result attribute]: what the result expressions refer to
        List<NamedExpression> results = new ArrayList<>();
        Attribute weight = slots.get(WEIGHT);
        results.add(weight);
        for (int i = 0; i < groupings.size(); i++) {
            results.add(restore(slots.get("__g" + i), groupings.get(i).toAttribute()));
        }
        for (int j = 0; j < aggregates.size(); j++) {
            AggregateExpression aggregate = aggregates.get(j);
            Expression value = finalValue(aggregate, kinds[j], types[j], slots, j);
            Attribute result = aggregate.resultAttribute();
            results.add(new Alias(value, result.name(), result.exprId(), emptyStrings(), Option.empty(), emptyStrings()));
        }
        LogicalPlan computed = new Project(seq(results), plan);
        List<NamedExpression> output = new ArrayList<>();
        output.add(weight);
        output.addAll(CollectionConverters.asJava(parts._3()));
        Set<ExprId> groups = new HashSet<>(); // none: the one row of an aggregate without GROUP BY
        for (NamedExpression grouping : groupings) {
            groups.add(grouping.toAttribute().exprId());
        }
        List<NamedExpression> resultList = CollectionConverters.asJava(parts._3());
        return new Out(new Project(seq(output), computed), weight, projected(List.of(groups), resultList),
                projected(List.of(groups), resultList)); // a group's rows are its grouping values'
    }

    /** An aggregate's value from its slots ({@link GroupAggregate#slots}), by the function's own final expression. */
    private static Expression finalValue(
            AggregateExpression aggregate, String kind, DataType input, Map<String, Attribute> slots, int j) {
        Attribute a = slots.get("a" + j), n = slots.get("n" + j);
        Expression none = new EqualTo(n, Literal.create(0L, DataTypes.LongType));
        switch (kind) {
            case "count_rows":
            case "count":
                return n;
            case "count_distinct":
                return a;
            case "min":
            case "max":
                return a;
            default:
                break;
        }
        Expression sum;
        if (input == DoubleType$.MODULE$ || input == FloatType$.MODULE$) {
            Expression nan = new GreaterThan(slots.get("nan" + j), Literal.create(0L, DataTypes.LongType));
            Expression positive = new GreaterThan(slots.get("pinf" + j), Literal.create(0L, DataTypes.LongType));
            Expression negative = new GreaterThan(slots.get("ninf" + j), Literal.create(0L, DataTypes.LongType));
            sum = CaseWhen$.MODULE$.apply(
                    seq(List.of(
                            new scala.Tuple2<Expression, Expression>(new Or(nan, new And(positive, negative)),
                                    Literal.create(Double.NaN, DataTypes.DoubleType)),
                            new scala.Tuple2<Expression, Expression>(positive,
                                    Literal.create(Double.POSITIVE_INFINITY, DataTypes.DoubleType)),
                            new scala.Tuple2<Expression, Expression>(negative,
                                    Literal.create(Double.NEGATIVE_INFINITY, DataTypes.DoubleType)))),
                    a);
        } else {
            sum = a;
        }
        sum = new If(none, Literal.create(null, a.dataType()), sum);
        DeclarativeAggregate function = (DeclarativeAggregate) aggregate.aggregateFunction();
        Map<ExprId, Expression> buffer = new HashMap<>();
        for (AttributeReference slot : CollectionConverters.asJava(function.aggBufferAttributes())) {
            switch (slot.name()) {
                case "sum":
                    buffer.put(slot.exprId(), new Cast(sum, slot.dataType(), Option.empty(), Cast$.MODULE$.apply$default$4()));
                    break;
                case "count":
                    buffer.put(slot.exprId(), new Cast(n, slot.dataType(), Option.empty(), Cast$.MODULE$.apply$default$4()));
                    break;
                case "isEmpty":
                    buffer.put(slot.exprId(), none);
                    break;
                default:
                    throw new IllegalStateException("the buffer of " + function.prettyName() + " has " + slot.name());
            }
        }
        return function.evaluateExpression().transform(new Replace(buffer));
    }

    private Out join(Join node) {
        Tuple8<JoinType, scala.collection.immutable.Seq<Expression>, scala.collection.immutable.Seq<Expression>,
                Option<Expression>, Option<Expression>, LogicalPlan, LogicalPlan, JoinHint> parts =
                ExtractEquiJoinKeys$.MODULE$.unapply(node).get();
        List<Expression> leftKeys = CollectionConverters.asJava(parts._2());
        List<Expression> rightKeys = CollectionConverters.asJava(parts._3());
        LogicalPlan leftPlan = parts._6(), rightPlan = parts._7();
        Out left = translate(leftPlan), right = translate(rightPlan);
        StructType leftSchema = positional(leftPlan.output()), rightSchema = positional(rightPlan.output());
        LogicalPlan leftSource = layout >= SOURCE_SIDES ? sourceSide(leftPlan, leftKeys) : null;
        LogicalPlan rightSource = layout >= SOURCE_SIDES ? sourceSide(rightPlan, rightKeys) : null;
        Expression leftValues = struct(leftSource, leftPlan.output());
        Expression rightValues = struct(rightSource, rightPlan.output());
        LogicalPlan sides = new Union(seq(List.of(
                side(0, leftSource != null ? leftSource : left.plan, leftSource != null ? null : left.weight,
                        leftValues, rightValues.dataType(), leftKeys),
                side(1, rightSource != null ? rightSource : right.plan, rightSource != null ? null : right.weight,
                        rightValues, leftValues.dataType(), rightKeys))), false, false);
        Dataset<Row> rows = Dataset$.MODULE$.ofRows(spark, sides);
        int[] key = new int[leftKeys.size()];
        List<StructField> keyFields = new ArrayList<>();
        for (int i = 0; i < key.length; i++) {
            key[i] = 4 + i;
            keyFields.add(rows.schema().fields()[4 + i]);
        }
        List<StructField> outFields = new ArrayList<>();
        outFields.add(DataTypes.createStructField(WEIGHT, DataTypes.IntegerType, false));
        for (StructField field : leftSchema.fields()) {
            outFields.add(DataTypes.createStructField("l" + field.name(), field.dataType(), true));
        }
        for (StructField field : rightSchema.fields()) {
            outFields.add(DataTypes.createStructField("r" + field.name(), field.dataType(), true));
        }
        String kind = joinKind(parts._1());
        boolean leftOne = oneRowPerKey(left, leftKeys), rightOne = oneRowPerKey(right, rightKeys);
        boolean values = layout >= VALUE_SIDES;
        valueSides |= values && (leftOne || rightOne);
        sourceSides |= leftSource != null || rightSource != null;
        EquiJoin processor = new EquiJoin(leftSchema, rightSchema, kind, values && leftOne, values && rightOne,
                leftSource != null, rightSource != null);
        Dataset<Row> joined = transform(rows, key, DataTypes.createStructType(keyFields), processor,
                DataTypes.createStructType(outFields));
        LogicalPlan plan = joined.logicalPlan();
        List<Attribute> columns = CollectionConverters.asJava(plan.output());
        List<NamedExpression> list = new ArrayList<>();
        list.add(columns.get(0));
        List<Attribute> wanted = new ArrayList<>(CollectionConverters.asJava(node.output()));
        for (int i = 0; i < wanted.size(); i++) {
            list.add(restore(columns.get(i + 1), wanted.get(i)));
        }
        LogicalPlan out = new Project(seq(list), plan);
        if (parts._4().isDefined()) {
            out = new Filter(parts._4().get(), out);
        }
        // a side's unique sets hold for the join's rows when each of its rows has at most one partner (and, outer,
        // is not one of the other side's padded rows, whose columns of this side are all NULL)
        List<Set<ExprId>> unique = new ArrayList<>();
        if (rightOne && (kind.equals("inner") || kind.equals("left"))) {
            unique.addAll(left.unique);
        }
        if (leftOne && (kind.equals("inner") || kind.equals("right"))) {
            unique.addAll(right.unique);
        }
        // the rows of a join key come out of its group: a preserved side's key columns are the group's key in every
        // row (an inner join's both sides'); a floating point key is grouped normalised, which its columns may not be
        List<Set<ExprId>> together = new ArrayList<>();
        if (!kind.equals("full") && !kind.equals("right")) {
            addKeyColumns(together, leftKeys);
        }
        if (!kind.equals("full") && !kind.equals("left")) {
            addKeyColumns(together, rightKeys);
        }
        return new Out(out, columns.get(0), unique, together);
    }

    private static void addKeyColumns(List<Set<ExprId>> together, List<Expression> keys) {
        Set<ExprId> columns = new HashSet<>();
        for (Expression key : keys) {
            if (!(key instanceof Attribute) || floating(key.dataType())) {
                return;
            }
            columns.add(((Attribute) key).exprId());
        }
        together.add(columns);
    }

    private static boolean floating(DataType type) {
        return type == DoubleType$.MODULE$ || type == FloatType$.MODULE$;
    }

    /**
     * One side of a join as {@link EquiJoin} takes it: {@code [side, weight, left struct, right struct, keys...]},
     * from {@code child} (its weighted rows, or, {@code weight} null, its source's changes), {@code values} this
     * side's struct and {@code other} the type of the other's.
     */
    private static LogicalPlan side(int side, LogicalPlan child, Attribute weight, Expression values, DataType other,
            List<Expression> keys) {
        List<NamedExpression> list = new ArrayList<>();
        list.add(alias(Literal.create(side, DataTypes.IntegerType), "__side"));
        list.add(alias(weight != null ? weight : Literal.create(1, DataTypes.IntegerType), WEIGHT));
        list.add(alias(side == 0 ? values : Literal.create(null, other), "__l"));
        list.add(alias(side == 1 ? values : Literal.create(null, other), "__r"));
        for (int i = 0; i < keys.size(); i++) {
            list.add(alias(normalised(keys.get(i)), "__k" + i));
        }
        return new Project(seq(list), child);
    }

    /**
     * A join side ({@code plan}, joined by {@code keys}) as its source's changes, when it can be given them (null:
     * it cannot): {@code [delete, place, position, order, <the side's columns>...]}. It can when it is one source's
     * table seen through renames of its columns and filters whose every expression cannot fail and gives the same
     * answer every time (a comparison, IS NULL, IN, AND, OR, NOT, a prefix, suffix or substring test: they are
     * evaluated on every change, not only on each key's last), and its join keys are exactly the source's PRIMARY
     * KEY (no floating point column: those are joined normalised). A change failing the filters deletes the key's
     * row from the side, as the table seen through them has none.
     */
    private LogicalPlan sourceSide(LogicalPlan plan, List<Expression> keys) {
        List<LogicalPlan> steps = new ArrayList<>(); // from the side down
        LogicalPlan node = plan;
        while (node instanceof Project || node instanceof Filter) {
            steps.add(node);
            node = node.children().head();
        }
        if (!(node instanceof LogicalRDD) || !changes.containsKey(((LogicalRDD) node).rdd().id())) {
            return null;
        }
        LogicalRDD source = (LogicalRDD) node;
        Map<ExprId, ExprId> origin = new HashMap<>(); // a column of the step -> the source's column it is
        for (Attribute column : CollectionConverters.asJava(source.output())) {
            origin.put(column.exprId(), column.exprId());
        }
        for (int i = steps.size() - 1; i >= 0; i--) {
            LogicalPlan step = steps.get(i);
            if (step instanceof Filter) {
                if (!cannotFail(((Filter) step).condition())) {
                    return null;
                }
                continue;
            }
            Map<ExprId, ExprId> renamed = new HashMap<>();
            for (NamedExpression column : CollectionConverters.asJava(((Project) step).projectList())) {
                Expression value = column instanceof Alias ? ((Alias) column).child() : (Expression) column;
                if (!(value instanceof Attribute) || !origin.containsKey(((Attribute) value).exprId())) {
                    return null; // a computed column: evaluated on every change, it might fail where the query does not
                }
                renamed.put(column.exprId(), origin.get(((Attribute) value).exprId()));
            }
            origin = renamed;
        }
        Set<ExprId> joinedBy = new HashSet<>();
        for (Expression key : keys) {
            if (!(key instanceof Attribute) || floating(key.dataType())
                    || !origin.containsKey(((Attribute) key).exprId())) {
                return null;
            }
            joinedBy.add(origin.get(((Attribute) key).exprId()));
        }
        Set<ExprId> primaryKey = new HashSet<>();
        List<Attribute> columns = CollectionConverters.asJava(source.output());
        for (int column : primaryKeys.get(source.rdd().id())) {
            primaryKey.add(columns.get(column).exprId());
        }
        if (primaryKey.isEmpty() || !joinedBy.equals(primaryKey)) {
            return null;
        }
        // the source's changes under the table's column ids, then each step with the change's four fields in front
        LogicalPlan given = changes.get(source.rdd().id()).logicalPlan();
        List<Attribute> fields = CollectionConverters.asJava(given.output());
        List<NamedExpression> list = new ArrayList<>(fields.subList(0, 4));
        for (int i = 0; i < columns.size(); i++) {
            list.add(restore(fields.get(4 + i), columns.get(i)));
        }
        LogicalPlan built = new Project(seq(list), given);
        Attribute delete = fields.get(0);
        for (int i = steps.size() - 1; i >= 0; i--) {
            LogicalPlan step = steps.get(i);
            list = new ArrayList<>();
            if (step instanceof Filter) { // a row the filters take out: the key has none
                Expression condition = new Coalesce(seq(List.of(((Filter) step).condition(),
                        Literal.create(false, DataTypes.BooleanType))));
                NamedExpression deleted = alias(new Or(delete, new Not(condition)), "delete");
                delete = deleted.toAttribute();
                list.add(deleted);
                list.addAll(fields.subList(1, 4));
                list.addAll(attributes(step.output()));
            } else {
                list.add(delete);
                list.addAll(fields.subList(1, 4));
                list.addAll(CollectionConverters.asJava(((Project) step).projectList()));
            }
            built = new Project(seq(list), built);
        }
        return built;
    }

    private static final Set<Class<?>> CANNOT_FAIL = Set.of(AttributeReference.class, Literal.class, And.class,
            Or.class, Not.class, IsNull.class, IsNotNull.class, EqualTo.class, EqualNullSafe.class, LessThan.class,
            LessThanOrEqual.class, GreaterThan.class, GreaterThanOrEqual.class, In.class, InSet.class,
            StartsWith.class, EndsWith.class, Contains.class);

    /** {@code condition} is made of expressions that cannot fail on any row and are deterministic. */
    private static boolean cannotFail(Expression condition) {
        return condition.deterministic() && condition.find(e -> !CANNOT_FAIL.contains(e.getClass())).isEmpty();
    }

    /** A FLOAT or DOUBLE value as Spark groups and joins by it: -0.0 as 0.0, every NaN as one. */
    private static Expression normalised(Expression value) {
        DataType type = value.dataType();
        return type == DoubleType$.MODULE$ || type == FloatType$.MODULE$ ? new NormalizeNaNAndZero(value) : value;
    }

    /**
     * A side's struct of its {@code columns} ({@code c0}, {@code c1}, ...), after the change's four fields when the
     * side is its source's changes ({@code changes}, from {@link #sourceSide}; null: its weighted rows).
     */
    private static Expression struct(LogicalPlan changes, scala.collection.immutable.Seq<Attribute> columns) {
        List<Expression> parts = new ArrayList<>();
        if (changes != null) {
            List<Attribute> fields = CollectionConverters.asJava(changes.output());
            String[] names = {"delete", "place", "position", "order"};
            for (int i = 0; i < names.length; i++) {
                parts.add(Literal.create(names[i], DataTypes.StringType));
                parts.add(fields.get(i));
            }
        }
        List<Attribute> list = CollectionConverters.asJava(columns);
        for (int i = 0; i < list.size(); i++) {
            parts.add(Literal.create("c" + i, DataTypes.StringType));
            parts.add(list.get(i));
        }
        return new CreateNamedStruct(seq(parts));
    }

    /** A side's columns by position (their names may repeat: a join's output has both sides' {@code id}). */
    private static StructType positional(scala.collection.immutable.Seq<Attribute> columns) {
        List<StructField> fields = new ArrayList<>();
        List<Attribute> list = CollectionConverters.asJava(columns);
        for (int i = 0; i < list.size(); i++) {
            fields.add(DataTypes.createStructField("c" + i, list.get(i).dataType(), list.get(i).nullable()));
        }
        return DataTypes.createStructType(fields);
    }

    /**
     * {@code rows} grouped by the fields at {@code key} (of {@code keySchema}) and transformed with state by
     * {@code processor} into rows of {@code output}: how every incremental operator runs.
     */
    @SuppressWarnings("unchecked")
    public static Dataset<Row> transform(Dataset<Row> rows, int[] key, StructType keySchema,
            org.apache.spark.sql.streaming.StatefulProcessor<Row, Row, Row> processor, StructType output) {
        return (Dataset<Row>) rows.groupByKey(new Fields(key), Encoders.row(keySchema))
                .transformWithState(processor, TimeMode.None(), OutputMode.Update(), Encoders.row(output));
    }

    // ---- small helpers ----

    private static NamedExpression alias(Expression child, String name) {
        return new Alias(child, name, org.apache.spark.sql.catalyst.expressions.NamedExpression$.MODULE$.newExprId(),
                emptyStrings(), Option.empty(), emptyStrings());
    }

    /** {@code value} under the name and expression id of {@code original}, as the nodes above refer to it. */
    private static NamedExpression restore(Attribute value, Attribute original) {
        Option<Metadata> metadata = Option.apply(original.metadata());
        return new Alias(value, original.name(), original.exprId(), emptyStrings(), metadata, emptyStrings());
    }

    private static List<NamedExpression> attributes(scala.collection.immutable.Seq<Attribute> output) {
        return new ArrayList<>(CollectionConverters.asJava(output));
    }

    private static List<Expression> allExpressions(LogicalPlan plan) {
        List<Expression> found = new ArrayList<>(CollectionConverters.asJava(plan.expressions()));
        for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
            found.addAll(allExpressions(child));
        }
        for (Object inner : CollectionConverters.asJava(plan.innerChildren())) {
            if (inner instanceof LogicalPlan) {
                found.addAll(allExpressions((LogicalPlan) inner));
            }
        }
        return found;
    }

    private static scala.collection.immutable.Seq<String> emptyStrings() {
        return seq(new ArrayList<String>());
    }

    @SuppressWarnings("unchecked")
    private static <T> scala.collection.immutable.Seq<T> seq(List<? extends T> list) {
        return (scala.collection.immutable.Seq<T>) CollectionConverters.asScala(new ArrayList<T>(list)).toSeq();
    }

    /** Replaces attributes by expression id: the aggregate buffer's attributes by the slots that hold them. */
    private static final class Replace extends scala.runtime.AbstractPartialFunction<Expression, Expression> {
        private final Map<ExprId, Expression> replacements;

        Replace(Map<ExprId, Expression> replacements) {
            this.replacements = replacements;
        }

        @Override
        public boolean isDefinedAt(Expression expression) {
            return expression instanceof AttributeReference
                    && replacements.containsKey(((AttributeReference) expression).exprId());
        }

        @Override
        @SuppressWarnings("unchecked")
        public <A1 extends Expression, B1> B1 applyOrElse(A1 expression, scala.Function1<A1, B1> otherwise) {
            return isDefinedAt(expression)
                    ? (B1) replacements.get(((AttributeReference) expression).exprId())
                    : otherwise.apply(expression);
        }
    }
}
