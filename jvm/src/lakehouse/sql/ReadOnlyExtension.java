package lakehouse.sql;

import java.util.Arrays;
import java.util.HashSet;
import java.util.Locale;
import java.util.Set;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.analysis.GlobalTempView$;
import org.apache.spark.sql.catalyst.analysis.LocalTempView$;
import org.apache.spark.sql.catalyst.analysis.ViewType;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.command.CreateViewCommand;

import scala.Function1;
import scala.collection.Iterator;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * Refuses every statement that changes data or the catalog, for `lakehouse sql` and the SQL
 * server: {@code spark.sql.extensions=lakehouse.sql.ReadOnlyExtension}.
 *
 * <p>On when the application's conf {@code spark.lakehouse.sql.readOnly} is true. That conf is
 * fixed when the application starts: neither SET nor a JDBC URL's session settings reach it, so
 * a client cannot switch the guard off.
 *
 * <p>Deny by default: a plan with a Command node (or an INSERT, or one of Delta's write nodes
 * that are not Commands) is refused unless the command is on the read-only allow-list. It runs
 * as a check rule, after analysis and before anything executes, eager commands included.
 */
public final class ReadOnlyExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {

  public static final String KEY = "spark.lakehouse.sql.readOnly";

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
      // temporary views only (checked below); CREATE TEMPORARY VIEW ... USING; DROP of a temp view
      "org.apache.spark.sql.execution.command.CreateViewCommand",
      "org.apache.spark.sql.execution.command.DropTempViewCommand",
      "org.apache.spark.sql.execution.datasources.CreateTempViewUsing"));

  /** Write nodes that do not implement Command. */
  private static final Set<String> DENIED = new HashSet<>(Arrays.asList(
      "org.apache.spark.sql.catalyst.plans.logical.DeltaDelete",
      "org.apache.spark.sql.catalyst.plans.logical.DeltaUpdateTable",
      "org.apache.spark.sql.catalyst.plans.logical.RestoreTableStatement",
      "org.apache.spark.sql.catalyst.plans.logical.CloneTableStatement"));

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectCheckRule(new AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
      @Override
      public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
        return new Guard(session);
      }
    });
    return BoxedUnit.UNIT;
  }

  static final class Guard extends AbstractFunction1<LogicalPlan, BoxedUnit> {
    private final SparkSession session;

    Guard(SparkSession session) {
      this.session = session;
    }

    @Override
    public BoxedUnit apply(LogicalPlan plan) {
      if (session.sparkContext().getConf().getBoolean(KEY, false)) {
        String refusal = check(plan);
        if (refusal != null) {
          // Not an AnalysisException on purpose: CheckAnalysis would append the plan tree to the
          // message, and nothing in Spark/Delta catches this type to try a fallback resolution.
          // PySpark raises it as pyspark.errors.UnsupportedOperationException, str(e) == message.
          throw new UnsupportedOperationException("read-only: " + refusal);
        }
      }
      return BoxedUnit.UNIT;
    }
  }

  /** Returns the refusal text for the first offending node, or null if the plan is read-only. */
  static String check(LogicalPlan node) {
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
