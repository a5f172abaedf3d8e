package lakehouse.sql;

import java.util.Locale;

import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.sources.BaseRelation;

/** How a refusal names what it refuses: as its author wrote it, and by Spark's class. */
final class ReadOnlyNames {

  private ReadOnlyNames() {}

  /** "java_method (CallMethodViaReflection)": the name SQL calls it by, and its class. */
  static String function(Expression expression) {
    return expression.prettyName() + " (" + expression.getClass().getSimpleName() + ")";
  }

  /** "Text `file:/etc/passwd`": the format and the paths of a relation read by path. */
  static String source(LogicalRelation relation) {
    BaseRelation base = relation.relation();
    if (base instanceof HadoopFsRelation) {
      HadoopFsRelation files = (HadoopFsRelation) base;
      return files.fileFormat().toString() + " "
          + files.location().rootPaths().mkString("`", "`, `", "`");
    }
    return base.getClass().getSimpleName();
  }

  /** "CREATE TABLE (CreateTable)": a statement-like label plus the plan class's simple name. */
  static String statement(LogicalPlan node) {
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
