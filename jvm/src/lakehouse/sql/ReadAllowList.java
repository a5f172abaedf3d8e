package lakehouse.sql;

import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.Locale;
import java.util.Set;
import java.util.TreeSet;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry$;
import org.apache.spark.sql.catalyst.analysis.LocalTempView$;
import org.apache.spark.sql.catalyst.analysis.ResolvedNamespace;
import org.apache.spark.sql.catalyst.analysis.ResolvedPersistentView;
import org.apache.spark.sql.catalyst.analysis.ResolvedTable;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.MetadataAttribute$;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Repartition;
import org.apache.spark.sql.catalyst.plans.logical.RepartitionByExpression;
import org.apache.spark.sql.catalyst.plans.logical.UnionLoop;
import org.apache.spark.sql.catalyst.plans.logical.View;
import org.apache.spark.sql.execution.command.CreateViewCommand;
import org.apache.spark.sql.execution.command.DescribeQueryCommand;
import org.apache.spark.sql.execution.command.ExplainCommand;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.catalyst.plans.logical.Range;

import scala.Option;
import scala.Tuple2;
import scala.collection.Iterator;

/**
 * What a read of the lake's tables may be, judged on a statement's analyzed plan: every plan
 * node and every expression of a class listed here, every relation a Delta table of the lake's
 * databases, every value-making function within {@link ValueBounds}. Anything else, whatever
 * syntax produced it, is refused with one line naming the node or function.
 */
final class ReadAllowList {

  private static final String LOGICAL = "org.apache.spark.sql.catalyst.plans.logical.";
  private static final String COMMAND = "org.apache.spark.sql.execution.command.";
  private static final String EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions.";

  /** Plan nodes of a query: they compute on the rows of their children. */
  static final Set<String> QUERY_NODES = names(LOGICAL,
      "Project", "Filter", "Join", "LateralJoin", "Aggregate", "Window", "Sort", "GlobalLimit",
      "LocalLimit", "Offset", "Tail", "Union", "Intersect", "Except", "Distinct", "Deduplicate",
      "SubqueryAlias", "WithCTE", "CTERelationDef", "CTERelationRef", "UnionLoop",
      "UnionLoopRef", "Generate", "Expand", "Sample", "Repartition", "RepartitionByExpression",
      "RebalancePartitions", "LocalRelation", "OneRowRelation", "Range", "ResolvedInlineTable");

  /** The deepest a recursive CTE may go: Spark's own default, which no client may raise. */
  static final int MAX_RECURSION = 100;

  /**
   * Aggregates whose state grows with their input (every value, or every distinct one) or with
   * an argument (a sketch's width): one group could hold a table in the server's memory.
   */
  private static final Set<String> UNBOUNDED_AGGREGATES = new HashSet<>(Arrays.asList(
      "CollectList", "CollectSet", "ListAgg", "Percentile", "PercentileCont", "PercentileDisc",
      "Median", "Mode", "HistogramNumeric", "CountMinSketchAgg", "BloomFilterAggregate"));

  /**
   * Statements that show what the lake holds: each names a table, view or database, judged
   * as one of the lake's by its resolved child (or, for Delta's, its table).
   */
  static final Set<String> METADATA = union(
      names(LOGICAL, "ShowTables", "ShowTablesExtended", "ShowViews", "ShowColumns",
          "ShowTableProperties", "ShowPartitions", "ShowCreateTable", "DescribeRelation",
          "DescribeColumn", "DescribeNamespace", "SetCatalogAndNamespace"),
      names(COMMAND, "ShowNamespacesCommand", "ShowCurrentNamespaceCommand",
          "ShowTablesCommand", "ShowColumnsCommand", "ShowTablePropertiesCommand",
          "ShowPartitionsCommand", "ShowCreateTableCommand", "ShowViewsCommand",
          "DescribeTableCommand", "DescribeColumnCommand", "DescribeDatabaseCommand",
          "ExplainCommand", "DescribeQueryCommand", "SetCommand", "CreateViewCommand",
          "DropTempViewCommand"),
      names("org.apache.spark.sql.delta.commands.", "DescribeDeltaHistoryCommand",
          "DescribeDeltaDetailCommand", "ShowDeltaTableColumnsCommand"));

  /** Metadata statements whose answer says where a table's or a database's files are. */
  private static final Set<String> LOCATIONS = new HashSet<>(Arrays.asList(
      "ShowCreateTable", "ShowCreateTableCommand", "ShowCreateTableAsSerdeCommand",
      "DescribeDeltaDetailCommand", "DescribeNamespace", "DescribeDatabaseCommand"));

  /** The resolved names metadata statements point at: judged as the lake's, or refused. */
  private static final Set<String> RESOLVED_NAMES = names(
      "org.apache.spark.sql.catalyst.analysis.", "ResolvedTable", "ResolvedNamespace",
      "ResolvedPersistentView", "ResolvedTempView", "ResolvedIdentifier");

  /** Groups of Spark's built-in functions that compute on the values they are given. */
  private static final Set<String> FUNCTION_GROUPS = new HashSet<>(Arrays.asList(
      "agg_funcs", "array_funcs", "bitwise_funcs", "collection_funcs", "conditional_funcs",
      "conversion_funcs", "csv_funcs", "datetime_funcs", "generator_funcs", "hash_funcs",
      "json_funcs", "lambda_funcs", "map_funcs", "math_funcs", "predicate_funcs", "string_funcs",
      "struct_funcs", "url_funcs", "variant_funcs", "window_funcs"));

  /** Built-ins of other groups (misc_funcs) an analyst may call. */
  private static final Set<String> FUNCTIONS = new HashSet<>(Arrays.asList(
      "current_catalog", "current_database", "current_schema", "current_user", "user",
      "session_user", "typeof", "version", "uuid", "monotonically_increasing_id",
      "spark_partition_id", "assert_true", "raise_error"));

  /**
   * Expressions the analyzer makes that no registered function name gives (references,
   * literals, casts, windows, subqueries, lambdas, date arithmetic, the forms builders make).
   */
  private static final Set<String> STRUCTURE = union(
      names(EXPRESSIONS, "AttributeReference", "Alias", "Literal", "Cast", "SortOrder",
          "WindowExpression", "WindowSpecDefinition", "SpecifiedWindowFrame", "UnspecifiedFrame$",
          "CurrentRow$", "UnboundedPreceding$", "UnboundedFollowing$", "ScalarSubquery", "Exists",
          "InSubquery", "ListQuery", "LateralSubquery", "OuterReference", "NamedLambdaVariable",
          "LambdaFunction", "GetStructField", "GetArrayStructFields", "GetArrayItem",
          "GetMapValue", "CreateNamedStruct", "CreateArray", "CreateMap", "KnownNotNull",
          "KnownNullable", "KnownFloatingPointNormalized", "In", "InSet", "Not", "And", "Or",
          "IsNull", "IsNotNull", "CaseWhen", "If", "Coalesce", "Explode", "PosExplode", "Inline",
          "Stack", "Grouping", "GroupingID", "TimeAdd", "DateAddInterval", "DateAddYMInterval",
          "TimestampAddYMInterval", "TimestampAddInterval", "SubtractTimestamps", "SubtractDates",
          "DatetimeSub", "UnaryMinus", "UnaryPositive", "MultiplyInterval", "DivideInterval",
          "MultiplyYMInterval", "MultiplyDTInterval", "DivideYMInterval", "DivideDTInterval",
          "CheckOverflow", "PromotePrecision", "StringLPad", "StringRPad", "ToPrettyString",
          "TryEval", "TypedNullLiteral", "With", "CommonExpressionDef", "CommonExpressionRef"),
      names(EXPRESSIONS + "aggregate.", "AggregateExpression", "PivotFirst"));

  private static final Set<String> EXPRESSION_CLASSES;

  static {
    Set<String> allowed = new HashSet<>(STRUCTURE);
    Iterator<?> names = FunctionRegistry$.MODULE$.functionSet().iterator();
    while (names.hasNext()) {
      String name = ((org.apache.spark.sql.catalyst.FunctionIdentifier) names.next()).funcName();
      ExpressionInfo info =
          (ExpressionInfo) ((Tuple2<?, ?>) FunctionRegistry$.MODULE$.expressions().get(name).get())._1();
      if (FUNCTION_GROUPS.contains(info.getGroup()) || FUNCTIONS.contains(name)) {
        allowed.add(info.getClassName());
      }
    }
    EXPRESSION_CLASSES = Collections.unmodifiableSet(allowed);
  }

  /** Whether an expression's class is one downstream SQL may compute with. */
  static boolean allowedExpression(Expression expression) {
    return allowedExpressionClass(expression.getClass().getName());
  }

  static boolean allowedExpressionClass(String className) {
    return EXPRESSION_CLASSES.contains(className);
  }

  private static final String READS = "downstream SQL reads the lake's tables by name, with "
      + "queries, SHOW, DESCRIBE and EXPLAIN";

  private final SparkSession session;
  private final Set<String> lake;

  ReadAllowList(SparkSession session, Set<String> lake) {
    this.session = session;
    this.lake = lake;
  }

  /** The refusal of an analyzed plan, or null if every node and expression in it is allowed. */
  String plan(LogicalPlan node) {
    String cls = node.getClass().getName();
    String refused;
    if (QUERY_NODES.contains(cls)) {
      refused = sizeKnobs(node);
    } else if (node instanceof LogicalRelation) {
      refused = relation((LogicalRelation) node);
    } else if (node instanceof View) {
      refused = view((View) node);
    } else if (RESOLVED_NAMES.contains(cls)) {
      refused = resolvedName(node);
    } else if (METADATA.contains(cls)) {
      refused = metadata(node);
      if (refused == null) {
        refused = namesFiles(node);
      }
      if (refused != null || cls.endsWith("ShowNamespacesCommand")) {
        return refused; // its root namespace child: the statement lists the lake's only
      }
    } else if (node instanceof Command) {
      refused = ReadOnlyNames.statement(node) + " changes data or the catalog, or reaches "
          + "beyond the lake; rerun with --allow-writes to permit it";
    } else {
      refused = "the plan node " + node.getClass().getSimpleName() + " is not one a read needs; "
          + READS;
    }
    if (refused != null) {
      return refused;
    }
    Iterator<Expression> expressions = node.expressions().iterator();
    while (expressions.hasNext()) {
      Expression expression = expressions.next();
      refused = expression(expression);
      if (refused == null) {
        refused = ValueBounds.check(expression);
      }
      if (refused != null) {
        return refused;
      }
    }
    Iterator<LogicalPlan> children = node.children().iterator();
    while (children.hasNext()) {
      refused = plan(children.next());
      if (refused != null) {
        return refused;
      }
    }
    return null;
  }

  /** The partitions and recursion a query node asks for, within the bounds of one statement. */
  private static String sizeKnobs(LogicalPlan node) {
    long partitions = 0;
    String what = null;
    if (node instanceof Range && ((Range) node).numSlices().isDefined()) {
      partitions = ((Number) ((Range) node).numSlices().get()).longValue();
      what = "range's slices";
    } else if (node instanceof Repartition) {
      partitions = ((Repartition) node).numPartitions();
      what = "a REPARTITION or COALESCE";
    } else if (node instanceof RepartitionByExpression
        && ((RepartitionByExpression) node).optNumPartitions().isDefined()) {
      partitions = ((Number) ((RepartitionByExpression) node).optNumPartitions().get()).longValue();
      what = "a REPARTITION";
    } else if (node instanceof UnionLoop) {
      UnionLoop loop = (UnionLoop) node;
      if (loop.maxDepth().isDefined()
          && ((Number) loop.maxDepth().get()).longValue() > MAX_RECURSION) {
        return "MAX RECURSION LEVEL " + loop.maxDepth().get() + " is refused: downstream SQL "
            + "recurses at most " + MAX_RECURSION + " levels";
      }
      String growing = ValueBounds.growing(loop.recursion());
      if (growing != null) {
        return growing + " in a recursive CTE's step is refused: the value would grow with "
            + "each level";
      }
    }
    if (partitions > ClientSettings.MAX_PARTITIONS) {
      return what + " of " + String.format("%,d", partitions) + " partitions is refused: one "
          + "statement may ask for at most " + ClientSettings.MAX_PARTITIONS;
    }
    return null;
  }

  private String expression(Expression expression) {
    String cls = expression.getClass().getName();
    if (expression instanceof AttributeReference
        && MetadataAttribute$.MODULE$.isValid(((AttributeReference) expression).metadata())) {
      return "the column " + ((AttributeReference) expression).name() + " is refused like "
          + "input_file_name(): downstream SQL does not say where a table's files are";
    }
    if (UNBOUNDED_AGGREGATES.contains(expression.getClass().getSimpleName())) {
      return "the aggregate " + ReadOnlyNames.function(expression) + " is refused: its state "
          + "grows with the rows it reads; use approx_percentile, approx_count_distinct, "
          + "count or max_by";
    }
    if (!EXPRESSION_CLASSES.contains(cls)) {
      return "the function " + ReadOnlyNames.function(expression)
          + " is not allowed in downstream SQL: only built-in functions that compute on values are";
    }
    if (expression instanceof SubqueryExpression) {
      String refused = plan(((SubqueryExpression) expression).plan());
      if (refused != null) {
        return refused;
      }
    }
    Iterator<Expression> children = expression.children().iterator();
    while (children.hasNext()) {
      String refused = expression(children.next());
      if (refused != null) {
        return refused;
      }
    }
    return null;
  }

  /** A Delta table of the lake's databases, by name, at any version: nothing by path. */
  private String relation(LogicalRelation relation) {
    Option<CatalogTable> table = relation.catalogTable();
    if (table.isEmpty()) {
      return "reading " + ReadOnlyNames.source(relation) + " by path is refused; " + READS;
    }
    return lakeTable(table.get());
  }

  private String lakeTable(CatalogTable table) {
    String name = table.identifier().unquotedString();
    if (!inTheLake(table.identifier().database())) {
      return "reading " + name + " is refused: it is outside the lake's databases ("
          + String.join(", ", lake) + "); " + READS;
    }
    String provider = table.provider().isDefined() ? table.provider().get() : "hive";
    if (!"delta".equalsIgnoreCase(provider)) {
      return "reading " + name + " is refused: a " + provider + " table, not one of the lake's "
          + "Delta tables; " + READS;
    }
    return null;
  }

  /** A persistent view of the lake's databases, or a temporary view of this session. */
  private String view(View view) {
    if (view.isTempView() || inTheLake(view.desc().identifier().database())) {
      return null;
    }
    return "reading the view " + view.desc().identifier().unquotedString() + " is refused: it is "
        + "outside the lake's databases (" + String.join(", ", lake) + "); " + READS;
  }

  private String resolvedName(LogicalPlan node) {
    String[] namespace;
    if (node instanceof ResolvedNamespace) {
      namespace = (String[]) ((ResolvedNamespace) node).namespace().toArray(
          scala.reflect.ClassTag$.MODULE$.apply(String.class));
    } else if (node instanceof ResolvedTable) {
      namespace = ((ResolvedTable) node).identifier().namespace();
    } else if (node instanceof ResolvedPersistentView) {
      namespace = ((ResolvedPersistentView) node).identifier().namespace();
    } else {
      return null; // a temporary view, or a name a statement of the list resolves for itself
    }
    String database = namespace.length == 1 ? namespace[0] : String.join(".", namespace);
    if (namespace.length == 1 && lake.contains(database.toLowerCase(Locale.ROOT))) {
      return null;
    }
    return "the database " + (database.isEmpty() ? "(none)" : database) + " is outside the "
        + "lake's (" + String.join(", ", lake) + "); " + READS;
  }

  /** A statement of {@link #METADATA}: what it names, shows or explains judged too. */
  private String metadata(LogicalPlan node) {
    if (node instanceof SetCommand) {
      return settable((SetCommand) node);
    }
    String outside = databasesNamed(node);
    if (outside != null) {
      return outside;
    }
    if (node instanceof ExplainCommand) {
      return plan(ReadOnlyExtension.analyze(session, ((ExplainCommand) node).logicalPlan()));
    }
    if (node instanceof DescribeQueryCommand) {
      return plan(ReadOnlyExtension.analyze(session, ((DescribeQueryCommand) node).plan()));
    }
    if (node instanceof CreateViewCommand) {
      CreateViewCommand create = (CreateViewCommand) node;
      if (create.viewType() != LocalTempView$.MODULE$) {
        return "CREATE VIEW (" + create.viewType() + ") changes the catalog; only a temporary "
            + "view of this session may be made; rerun with --allow-writes to permit it";
      }
      LogicalPlan query = create.isAnalyzed() ? create.plan()
          : ReadOnlyExtension.analyze(session, create.plan());
      return plan(query);
    }
    if (node.getClass().getSimpleName().equals("DescribeDeltaHistoryCommand")) {
      return deltaTable(node);
    }
    return null;
  }

  /** DESCRIBE HISTORY names its table in a field: a lake table by name, never a path. */
  private String deltaTable(LogicalPlan node) {
    Iterator<Object> fields = node.productIterator();
    while (fields.hasNext()) {
      Object field = fields.next();
      if (field != null && field.getClass().getSimpleName().equals("DeltaTableV2")) {
        try {
          Option<?> table = (Option<?>) field.getClass().getMethod("catalogTable").invoke(field);
          if (table.isEmpty()) {
            return "DESCRIBE HISTORY of a table by path is refused; " + READS;
          }
          return lakeTable((CatalogTable) table.get());
        } catch (ReflectiveOperationException error) {
          return "DESCRIBE HISTORY could not be judged (" + error + ")";
        }
      }
    }
    return "DESCRIBE HISTORY of an unknown table is refused; " + READS;
  }

  /** A statement that would print the lake's paths, refused as input_file_name() is. */
  private static String namesFiles(LogicalPlan node) {
    boolean extended = false;
    for (int i = 0; i < node.productArity(); i++) {
      extended |= node.productElementName(i).equals("isExtended")
          && Boolean.TRUE.equals(node.productElement(i));
    }
    String simple = node.getClass().getSimpleName();
    if (!extended && !LOCATIONS.contains(simple)) {
      return null;
    }
    return ReadOnlyNames.statement(node) + (extended ? " EXTENDED" : "") + " is refused like "
        + "input_file_name(): it says where the lake's files are; DESCRIBE TABLE, SHOW TABLES "
        + "and DESCRIBE HISTORY say what a table holds";
  }

  /**
   * The databases a v1 metadata command names in its fields (a table's identifier, or a
   * database by name; none: the current one), each the lake's, or the refusal.
   */
  private String databasesNamed(LogicalPlan node) {
    for (int i = 0; i < node.productArity(); i++) {
      Object field = node.productElement(i);
      String named = node.productElementName(i).toLowerCase(Locale.ROOT);
      Option<?> database;
      if (field instanceof TableIdentifier) {
        database = ((TableIdentifier) field).database();
      } else if (named.contains("database") || named.equals("db")) {
        database = field instanceof Option ? (Option<?>) field : Option.apply(field);
      } else {
        continue;
      }
      String name = database.isDefined() ? String.valueOf(database.get())
          : session.sessionState().catalog().getCurrentDatabase();
      if (!lake.contains(name.toLowerCase(Locale.ROOT))
          && !(field instanceof TableIdentifier && database.isEmpty() && temporary(field))) {
        return "the database " + name + " " + "is outside the lake's (" + String.join(", ", lake)
            + "); " + READS;
      }
    }
    return null;
  }

  private boolean temporary(Object table) {
    return session.sessionState().catalog().isTempView((TableIdentifier) table);
  }

  /**
   * SET key=value of a key and value {@link ClientSettings} allows, and SET key of such a key.
   * SET and SET -v never reach here: the parser answers them with the settable keys alone.
   */
  private static String settable(SetCommand set) {
    Option<Tuple2<String, Option<String>>> kv = set.kv();
    if (kv.isEmpty()) {
      return null;
    }
    String key = kv.get()._1().trim();
    if (kv.get()._2().isEmpty()) {
      return ClientSettings.KEYS.contains(key) ? null : "SET " + key + " is refused: a session "
          + "may see and set only " + String.join(", ", ClientSettings.KEYS);
    }
    return ClientSettings.refusal(key, kv.get()._2().get());
  }

  private boolean inTheLake(Option<String> database) {
    return database.isDefined() && lake.contains(database.get().toLowerCase(Locale.ROOT));
  }

  private static Set<String> names(String prefix, String... simple) {
    Set<String> out = new HashSet<>();
    for (String name : simple) {
      out.add(prefix + name);
    }
    return Collections.unmodifiableSet(out);
  }

  @SafeVarargs
  private static Set<String> union(Set<String>... sets) {
    Set<String> out = new HashSet<>();
    for (Set<String> set : sets) {
      out.addAll(set);
    }
    return Collections.unmodifiableSet(out);
  }
}
