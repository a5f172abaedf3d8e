package lakehouse.sql;

import java.util.Arrays;
import java.util.HashSet;
import java.util.Locale;
import java.util.Set;

import org.apache.spark.sql.catalyst.analysis.FunctionRegistry$;
import org.apache.spark.sql.catalyst.analysis.UnresolvedFunction;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

import scala.Option;
import scala.Tuple2;
import scala.collection.Iterator;

/**
 * A statement judged as parsed, before Spark's analyzer sees it: the analyzer evaluates some
 * expressions while it resolves a statement (the rows of {@code VALUES}, {@code LIMIT} and
 * {@code OFFSET}, a table function's arguments, a time-travel timestamp, {@code EXECUTE
 * IMMEDIATE}'s text and arguments), so what it may evaluate is judged first. Every function a
 * statement calls, anywhere, must be one of the built-ins {@link ReadAllowList} allows; in
 * those places, nothing that makes a value of a size its arguments give, and nothing whose
 * name or value is computed.
 */
final class BeforeAnalysis {

  /** Parsed nodes whose expressions the analyzer evaluates. */
  private static final Set<String> EVALUATED = new HashSet<>(Arrays.asList(
      "UnresolvedInlineTable", "GlobalLimit", "LocalLimit", "Offset", "Tail",
      "UnresolvedTableValuedFunction", "RelationTimeTravel", "UnresolvedExecuteImmediate"));

  /** Unresolved forms that evaluate nothing themselves (their children are judged). */
  private static final Set<String> PLACEHOLDERS = new HashSet<>(Arrays.asList(
      "UnresolvedAttribute", "UnresolvedAlias", "NamedArgumentExpression"));

  private BeforeAnalysis() {}

  /** The refusal of a parsed statement, or null if the analyzer may see it. */
  static String refusal(LogicalPlan node) {
    String kind = node.getClass().getSimpleName();
    boolean evaluated = EVALUATED.contains(kind);
    Iterator<Expression> expressions = node.expressions().iterator();
    while (expressions.hasNext()) {
      String refused = expression(expressions.next(), evaluated ? where(kind) : null);
      if (refused != null) {
        return refused;
      }
    }
    // A CTE's definitions are inner children of the WITH that names them, not children.
    String refused = plans(node.children().iterator());
    return refused != null ? refused : plans(node.innerChildren().iterator());
  }

  private static String plans(Iterator<?> plans) {
    while (plans.hasNext()) {
      Object plan = plans.next();
      if (plan instanceof LogicalPlan) {
        String refused = refusal((LogicalPlan) plan);
        if (refused != null) {
          return refused;
        }
      }
    }
    return null;
  }

  /** {@code evaluated}: where Spark evaluates this expression while analyzing, or null. */
  private static String expression(Expression expression, String evaluated) {
    if (expression instanceof UnresolvedFunction) {
      String refused = function((UnresolvedFunction) expression, evaluated);
      if (refused != null) {
        return refused;
      }
    } else if (evaluated != null && !ReadAllowList.allowedExpression(expression)
        && !PLACEHOLDERS.contains(expression.getClass().getSimpleName())) {
      return expression.prettyName() + " (" + expression.getClass().getSimpleName() + ") in "
          + evaluated + " is refused: Spark evaluates it before the statement is judged; "
          + "write literals there";
    } else if (evaluated != null && ValueBounds.SIZED.contains(expression.getClass().getSimpleName())) {
      return sized(expression.prettyName(), evaluated);
    }
    if (expression instanceof SubqueryExpression) {
      String refused = refusal(((SubqueryExpression) expression).plan());
      if (refused != null) {
        return refused;
      }
    }
    Iterator<Expression> children = expression.children().iterator();
    while (children.hasNext()) {
      String refused = expression(children.next(), evaluated);
      if (refused != null) {
        return refused;
      }
    }
    return null;
  }

  private static String function(UnresolvedFunction call, String evaluated) {
    scala.collection.immutable.Seq<String> parts = call.nameParts();
    String name = parts.last().toLowerCase(Locale.ROOT);
    boolean builtinName = parts.size() == 1 || (parts.size() <= 3
        && parts.init().mkString(".").toLowerCase(Locale.ROOT).matches("(system\\.)?builtin"));
    Option<?> found = builtinName
        ? FunctionRegistry$.MODULE$.expressions().get(name) : Option.empty();
    if (found.isEmpty()) {
      return "the function " + parts.mkString(".") + " is not allowed in downstream SQL: only "
          + "Spark's built-in functions that compute on values are";
    }
    String className = ((ExpressionInfo) ((Tuple2<?, ?>) found.get())._1()).getClassName();
    if (!ReadAllowList.allowedExpressionClass(className)) {
      return "the function " + name + " (" + className.substring(className.lastIndexOf('.') + 1)
          + ") is not allowed in downstream SQL: only built-in functions that compute on values are";
    }
    if (evaluated != null
        && ValueBounds.SIZED.contains(className.substring(className.lastIndexOf('.') + 1))) {
      return sized(name, evaluated);
    }
    return null;
  }

  private static String sized(String name, String evaluated) {
    return name + " in " + evaluated + " is refused: Spark evaluates it before the statement is "
        + "judged, and it makes a value of the size its arguments give";
  }

  private static String where(String kind) {
    switch (kind) {
      case "UnresolvedInlineTable":
        return "VALUES";
      case "GlobalLimit":
      case "LocalLimit":
      case "Tail":
        return "LIMIT";
      case "Offset":
        return "OFFSET";
      case "RelationTimeTravel":
        return "TIMESTAMP AS OF";
      case "UnresolvedExecuteImmediate":
        return "EXECUTE IMMEDIATE";
      default:
        return "a table function's arguments";
    }
  }
}
