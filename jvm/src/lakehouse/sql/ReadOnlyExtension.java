package lakehouse.sql;

import java.util.Arrays;
import java.util.HashSet;
import java.util.Locale;
import java.util.Set;
import java.util.TreeSet;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry$;
import org.apache.spark.sql.catalyst.analysis.GlobalTempView$;
import org.apache.spark.sql.catalyst.analysis.LocalTempView$;
import org.apache.spark.sql.catalyst.analysis.UnresolvedFunction;
import org.apache.spark.sql.catalyst.analysis.UnresolvedGenerator;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.analysis.UnresolvedTableValuedFunction;
import org.apache.spark.sql.catalyst.analysis.ViewType;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.parser.ParameterContext;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.command.CreateViewCommand;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

import scala.Function1;
import scala.Option;
import scala.Tuple2;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * Downstream SQL reads the lake's tables and changes nothing, for `lakehouse sql` and the SQL
 * server: {@code spark.sql.extensions=lakehouse.sql.ReadOnlyExtension}.
 *
 * <p>On when the application's conf {@code spark.lakehouse.sql.readOnly} is true. That conf is
 * fixed when the application starts: neither SET nor a JDBC URL's session settings reach it, so
 * a client cannot switch the guard off.
 *
 * <p>Deny by default, with allow-lists, in two places:
 * <ul>
 *   <li>each statement as parsed from SQL text (a parser around Spark's and Delta's), so that
 *       the plans Delta and Spark build themselves (a table's log read by path, their own
 *       UDFs) are not judged: it may read tables by name in the lake's databases, CTEs,
 *       literal rows and {@code range} only (never a file or data source by path or options:
 *       {@code text.`/etc/passwd`}, {@code delta.`path`}, {@code USING jdbc}); call Spark's
 *       built-in functions of the groups that compute on values and a few named others (never
 *       {@code reflect}, {@code java_method}, XML parsing or a function of the catalog); and
 *       {@code SET} only settings of how a query computes or shows its result;
 *   <li>the analyzed plan (a check rule, before anything executes, eager commands included):
 *       a Command node (or an INSERT, or one of Delta's write nodes that are not Commands)
 *       only if it neither changes data nor the catalog: SHOW, DESCRIBE, EXPLAIN, USE...
 * </ul>
 */
public final class ReadOnlyExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {

  public static final String KEY = "spark.lakehouse.sql.readOnly";

  /** The databases whose tables downstream SQL may read, comma-separated: the lake's layers. */
  public static final String DATABASES = "spark.lakehouse.sql.databases";

  /** Commands that neither change data nor the catalog. */
  private static final Set<String> ALLOWED = new HashSet<>(Arrays.asList(
      // SHOW ...
      "org.apache.spark.sql.catalyst.plans.logical.ShowTables",
      "org.apache.spark.sql.catalyst.plans.logical.ShowTablesExtended",
      "org.apache.spark.sql.catalyst.plans.logical.ShowTablePartition",
      "org.apache.spark.sql.catalyst.plans.logical.ShowNamespaces",
      "org.apache.spark.sql.catalyst.plans.logical.ShowTableProperties",
      "org.apache.spark.sql.catalyst.plans.logical.ShowColumns",
      "org.apache.spark.sql.catalyst.plans.logical.ShowPartitions",
      "org.apache.spark.sql.catalyst.plans.logical.ShowFunctions",
      "org.apache.spark.sql.catalyst.plans.logical.ShowViews",
      "org.apache.spark.sql.catalyst.plans.logical.ShowCreateTable",
      "org.apache.spark.sql.execution.command.ShowNamespacesCommand",
      "org.apache.spark.sql.execution.command.ShowCatalogsCommand",
      "org.apache.spark.sql.execution.command.ShowCurrentNamespaceCommand",
      "org.apache.spark.sql.execution.command.ShowTablesCommand",
      "org.apache.spark.sql.execution.command.ShowTablePropertiesCommand",
      "org.apache.spark.sql.execution.command.ShowColumnsCommand",
      "org.apache.spark.sql.execution.command.ShowPartitionsCommand",
      "org.apache.spark.sql.execution.command.ShowFunctionsCommand",
      "org.apache.spark.sql.execution.command.ShowViewsCommand",
      "org.apache.spark.sql.execution.command.ShowCreateTableCommand",
      "org.apache.spark.sql.execution.command.ShowCreateTableAsSerdeCommand",
      "org.apache.spark.sql.delta.commands.ShowDeltaTableColumnsCommand",
      "org.apache.spark.sql.delta.commands.ShowDeltaPartitionsCommand",
      // DESCRIBE ...
      "org.apache.spark.sql.catalyst.plans.logical.DescribeRelation",
      "org.apache.spark.sql.catalyst.plans.logical.DescribeColumn",
      "org.apache.spark.sql.catalyst.plans.logical.DescribeNamespace",
      "org.apache.spark.sql.catalyst.plans.logical.DescribeFunction",
      "org.apache.spark.sql.execution.command.DescribeTableCommand",
      "org.apache.spark.sql.execution.command.DescribeColumnCommand",
      "org.apache.spark.sql.execution.command.DescribeDatabaseCommand",
      "org.apache.spark.sql.execution.command.DescribeFunctionCommand",
      "org.apache.spark.sql.execution.command.DescribeQueryCommand",
      "org.apache.spark.sql.delta.commands.DescribeDeltaHistoryCommand",
      "org.apache.spark.sql.delta.commands.DescribeDeltaDetailCommand",
      // EXPLAIN, USE, SET/RESET of session settings, LIST, session variables
      "org.apache.spark.sql.execution.command.ExplainCommand",
      "org.apache.spark.sql.catalyst.plans.logical.SetCatalogAndNamespace",
      "org.apache.spark.sql.execution.command.SetCommand",
      "org.apache.spark.sql.execution.command.ResetCommand",
      "org.apache.spark.sql.execution.command.ListJarsCommand",
      "org.apache.spark.sql.execution.command.ListFilesCommand",
      "org.apache.spark.sql.catalyst.plans.logical.CreateVariable",
      "org.apache.spark.sql.catalyst.plans.logical.DropVariable",
      "org.apache.spark.sql.catalyst.plans.logical.SetVariable",
      // temporary views only (checked below; their query when parsed); DROP of a temp view
      "org.apache.spark.sql.execution.command.CreateViewCommand",
      "org.apache.spark.sql.execution.command.DropTempViewCommand"));

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
      "spark_partition_id", "input_file_name", "assert_true", "raise_error"));

  /** Table-valued functions a query may read from. */
  private static final Set<String> TABLE_FUNCTIONS = new HashSet<>(Arrays.asList("range"));

  /** Settings `SET key=value` may change: how a query computes or shows its result. */
  private static final Set<String> SETTABLE = new TreeSet<>(Arrays.asList(
      "spark.sql.session.timeZone", "spark.sql.ansi.enabled", "spark.sql.shuffle.partitions",
      "spark.sql.adaptive.enabled", "spark.sql.autoBroadcastJoinThreshold",
      "spark.sql.legacy.timeParserPolicy", "spark.sql.caseSensitive", "spark.sql.timestampType",
      "spark.sql.datetime.java8API.enabled", "spark.sql.decimalOperations.allowPrecisionLoss"));

  private static final String BY_NAME_ONLY = "downstream SQL reads the lake's tables by name only";

  /** Write nodes that do not implement Command. */
  private static final Set<String> DENIED = new HashSet<>(Arrays.asList(
      "org.apache.spark.sql.catalyst.plans.logical.DeltaDelete",
      "org.apache.spark.sql.catalyst.plans.logical.DeltaUpdateTable",
      "org.apache.spark.sql.catalyst.plans.logical.RestoreTableStatement",
      "org.apache.spark.sql.catalyst.plans.logical.CloneTableStatement"));

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectParser(
        new AbstractFunction2<SparkSession, ParserInterface, ParserInterface>() {
          @Override
          public ParserInterface apply(SparkSession session, ParserInterface parser) {
            return new Parser(session, parser);
          }
        });
    extensions.injectCheckRule(new AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
      @Override
      public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
        return new Guard(session);
      }
    });
    return BoxedUnit.UNIT;
  }

  static boolean on(SparkSession session) {
    return session.sparkContext().getConf().getBoolean(KEY, false);
  }

  static LogicalPlan refuse(String refusal) {
    // Not an AnalysisException on purpose: CheckAnalysis would append the plan tree to the
    // message, and nothing in Spark/Delta catches this type to try a fallback resolution.
    // PySpark raises it as pyspark.errors.UnsupportedOperationException, str(e) == message.
    throw new UnsupportedOperationException("read-only: " + refusal);
  }

  static final class Guard extends AbstractFunction1<LogicalPlan, BoxedUnit> {
    private final SparkSession session;

    Guard(SparkSession session) {
      this.session = session;
    }

    @Override
    public BoxedUnit apply(LogicalPlan plan) {
      if (on(session)) {
        String refusal = check(plan);
        if (refusal != null) {
          refuse(refusal);
        }
      }
      return BoxedUnit.UNIT;
    }
  }

  /** Spark's (and Delta's) parser, judging each statement parsed from SQL text. */
  static final class Parser implements ParserInterface {
    private final SparkSession session;
    private final ParserInterface parser;

    Parser(SparkSession session, ParserInterface parser) {
      this.session = session;
      this.parser = parser;
    }

    private LogicalPlan judged(LogicalPlan statement) {
      if (on(session)) {
        String databases = session.sparkContext().getConf().get(DATABASES, "");
        String refusal = checkStatement(statement, databases);
        if (refusal != null) {
          return refuse(refusal);
        }
      }
      return statement;
    }

    @Override
    public LogicalPlan parsePlan(String sqlText) throws ParseException {
      return judged(parser.parsePlan(sqlText));
    }

    @Override
    public LogicalPlan parsePlanWithParameters(String sqlText, ParameterContext parameters)
        throws ParseException {
      return judged(parser.parsePlanWithParameters(sqlText, parameters));
    }

    @Override
    public Expression parseExpression(String sqlText) throws ParseException {
      return parser.parseExpression(sqlText);
    }

    @Override
    public TableIdentifier parseTableIdentifier(String sqlText) throws ParseException {
      return parser.parseTableIdentifier(sqlText);
    }

    @Override
    public FunctionIdentifier parseFunctionIdentifier(String sqlText) throws ParseException {
      return parser.parseFunctionIdentifier(sqlText);
    }

    @Override
    public Seq<String> parseMultipartIdentifier(String sqlText) throws ParseException {
      return parser.parseMultipartIdentifier(sqlText);
    }

    @Override
    public LogicalPlan parseQuery(String sqlText) throws ParseException {
      return parser.parseQuery(sqlText);
    }

    @Override
    public StructType parseRoutineParam(String sqlText) throws ParseException {
      return parser.parseRoutineParam(sqlText);
    }

    @Override
    public StructType parseTableSchema(String sqlText) throws ParseException {
      return parser.parseTableSchema(sqlText);
    }

    @Override
    public DataType parseDataType(String sqlText) throws ParseException {
      return parser.parseDataType(sqlText);
    }
  }

  /**
   * The refusal of a statement as parsed, or null: what it reads, the functions it calls and
   * what it sets, in the statement, its subqueries and the query of a view it creates.
   */
  public static String checkStatement(LogicalPlan node, String databases) {
    String cls = node.getClass().getName();
    if (cls.equals("org.apache.spark.sql.execution.datasources.CreateTempViewUsing")) {
      return "CREATE TEMPORARY VIEW ... USING (CreateTempViewUsing) reads a data source; "
          + BY_NAME_ONLY;
    }
    if (node instanceof SetCommand) {
      String refusal = settable((SetCommand) node);
      if (refusal != null) {
        return refusal;
      }
    }
    if (node instanceof UnresolvedRelation) {
      Seq<String> name = ((UnresolvedRelation) node).multipartIdentifier();
      if (!inTheLake(name, databases)) {
        return "reading " + name.mkString("`", "`.`", "`") + " is refused: a file, a path or a database "
            + "outside the lake's (" + databases + "); " + BY_NAME_ONLY;
      }
    }
    if (node instanceof UnresolvedTableValuedFunction) {
      String name = ((UnresolvedTableValuedFunction) node).name().mkString(".");
      if (!TABLE_FUNCTIONS.contains(name.toLowerCase(Locale.ROOT))) {
        return "reading from the function " + name + " is refused; " + BY_NAME_ONLY;
      }
    }
    Iterator<Expression> expressions = node.expressions().iterator();
    while (expressions.hasNext()) {
      String refusal = calls(expressions.next(), databases);
      if (refusal != null) {
        return refusal;
      }
    }
    Iterator<LogicalPlan> it = node.children().iterator();
    while (it.hasNext()) {
      String refusal = checkStatement(it.next(), databases);
      if (refusal != null) {
        return refusal;
      }
    }
    return null;
  }

  /** `table` (the current database, a CTE or a temporary view) or `<lake database>.table`. */
  static boolean inTheLake(Seq<String> name, String databases) {
    if (name.size() == 1) {
      return true;
    }
    Set<String> allowed = new HashSet<>(Arrays.asList(databases.toLowerCase(Locale.ROOT).split(",")));
    int database = name.size() == 3 && name.apply(0).equalsIgnoreCase("spark_catalog") ? 1 : 0;
    return name.size() == database + 2
        && allowed.contains(name.apply(database).toLowerCase(Locale.ROOT));
  }

  /** An expression and those inside it: built-ins of the allowed groups and names only. */
  static String calls(Expression expression, String databases) {
    String name = null;
    if (expression instanceof UnresolvedFunction) {
      name = ((UnresolvedFunction) expression).nameParts().mkString(".");
    } else if (expression instanceof UnresolvedGenerator) {
      name = ((UnresolvedGenerator) expression).name().unquotedString();
    }
    if (name != null && !computesOnValues(name.toLowerCase(Locale.ROOT))) {
      return "the function " + name + " is not allowed in downstream SQL: only built-in "
          + "functions that compute on values are";
    }
    if (expression instanceof SubqueryExpression) {
      String refusal = checkStatement(((SubqueryExpression) expression).plan(), databases);
      if (refusal != null) {
        return refusal;
      }
    }
    Iterator<Expression> it = expression.children().iterator();
    while (it.hasNext()) {
      String refusal = calls(it.next(), databases);
      if (refusal != null) {
        return refusal;
      }
    }
    return null;
  }

  /** A built-in of Spark's registry, of an allowed group or named in {@link #FUNCTIONS}. */
  static boolean computesOnValues(String name) {
    Option<?> found = FunctionRegistry$.MODULE$.expressions().get(name);
    if (found.isEmpty()) {
      return false;
    }
    ExpressionInfo info = (ExpressionInfo) ((Tuple2<?, ?>) found.get())._1();
    return FUNCTION_GROUPS.contains(info.getGroup()) || FUNCTIONS.contains(name);
  }

  /** SET key=value of a key in {@link #SETTABLE}; SET alone or SET key only reads. */
  static String settable(SetCommand set) {
    Option<Tuple2<String, Option<String>>> kv = set.kv();
    if (kv.isEmpty() || kv.get()._2().isEmpty()) {
      return null;
    }
    String key = kv.get()._1().trim();
    if (SETTABLE.contains(key)) {
      return null;
    }
    return "SET " + key + " is refused: downstream SQL may set only " + String.join(", ", SETTABLE);
  }

  /** Returns the refusal text for the first offending node, or null if the plan is read-only. */
  public static String check(LogicalPlan node) {
    String cls = node.getClass().getName();
    boolean write = node instanceof Command || node instanceof InsertIntoStatement
        || DENIED.contains(cls);
    if (write) {
      if (!ALLOWED.contains(cls)) {
        return describe(node) + " changes data or the catalog; rerun with --allow-writes to permit it";
      }
      if (node instanceof CreateViewCommand) {
        ViewType type = ((CreateViewCommand) node).viewType();
        if (type != LocalTempView$.MODULE$ && type != GlobalTempView$.MODULE$) {
          return "CREATE VIEW (CreateViewCommand) changes data or the catalog;"
              + " rerun with --allow-writes to permit it";
        }
      }
    }
    Iterator<LogicalPlan> it = node.children().iterator();
    while (it.hasNext()) {
      String refusal = check(it.next());
      if (refusal != null) {
        return refusal;
      }
    }
    return null;
  }

  /** "CREATE TABLE (CreateTable)": a statement-like label plus the plan class's simple name. */
  static String describe(LogicalPlan node) {
    String simple = node.getClass().getSimpleName().replace("$", "");
    String label;
    switch (simple) {
      case "AppendData":
      case "InsertIntoStatement":
      case "InsertIntoHadoopFsRelationCommand":
      case "InsertIntoDataSourceCommand":
      case "InsertIntoHiveTable":
        label = "INSERT INTO";
        break;
      case "OverwriteByExpression":
      case "OverwritePartitionsDynamic":
        label = "INSERT OVERWRITE";
        break;
      case "CreateDataSourceTableCommand":
      case "CreateTableCommand":
      case "CreateDeltaTableCommand":
        label = "CREATE TABLE";
        break;
      case "CreateNamespace":
        label = "CREATE DATABASE";
        break;
      case "DropNamespace":
        label = "DROP DATABASE";
        break;
      default:
        // CamelCase -> "CAMEL CASE", without a trailing "Command": OptimizeTableCommand -> OPTIMIZE TABLE
        String base = simple.endsWith("Command") && simple.length() > 7
            ? simple.substring(0, simple.length() - 7) : simple;
        label = base.replaceAll("([a-z0-9])([A-Z])", "$1 $2").toUpperCase(Locale.ROOT);
    }
    return label + " (" + simple + ")";
  }
}
