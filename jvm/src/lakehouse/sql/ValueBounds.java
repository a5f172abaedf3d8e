package lakehouse.sql;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.spark.sql.catalyst.expressions.ArrayAggregate;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.LambdaFunction;
import org.apache.spark.sql.catalyst.expressions.RuntimeReplaceable;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType$;
import org.apache.spark.sql.types.TimestampNTZType$;
import org.apache.spark.sql.types.TimestampType$;
import org.apache.spark.unsafe.types.CalendarInterval;

import scala.collection.Iterator;

/**
 * Bounds on the functions that make a value whose size an argument gives (sequence, repeat,
 * array_repeat, lpad, rpad, space, randstr, format_string): a single value of such a function
 * can take the server's memory, and Spark evaluates literal ones in the server itself while
 * it plans. So those arguments must be literals within bounds, at most one such function in
 * an expression, and none inside a lambda (applied to each element of an array).
 */
final class ValueBounds {

  static final long MAX_ELEMENTS = 1_000_000L;
  static final long MAX_CHARS = 1L << 20;
  /** What all elements of one array may hold together, counted in characters. */
  static final long MAX_ARRAY_CHARS = 16 * MAX_CHARS;
  /** What a string from a column is taken to hold when a count multiplies it. */
  static final long COLUMN_CHARS = 1024L;

  /** The most decimal places format_number may print. */
  static final long MAX_DECIMALS = 1000L;

  static final Set<String> SIZED = new HashSet<>(Arrays.asList(
      "Sequence", "StringRepeat", "ArrayRepeat", "StringLPad", "StringRPad", "StringSpace",
      "RandStr", "FormatString", "ArrayInsert", "FormatNumber", "StringReplace"));

  /**
   * Functions whose value may be larger than each of their arguments: harmless once, but applied
   * again to their own result (a recursive CTE's step, aggregate's merge) they grow without bound.
   */
  private static final Set<String> GROWING = new HashSet<>(Arrays.asList(
      "Concat", "ConcatWs", "ArrayAppend", "ArrayPrepend", "ArrayUnion", "ArrayInsert",
      "Flatten", "MapConcat", "StringReplace", "Overlay", "StringRepeat", "ArrayRepeat",
      "StringLPad", "StringRPad", "Sequence", "FormatString", "ArraysZip", "ArrayJoin"));

  private static final double DAY = 86_400_000_000.0;
  private static final Pattern WIDTH = Pattern.compile("%[^a-zA-Z%]*");
  private static final Pattern NUMBER = Pattern.compile("\\d+");

  private ValueBounds() {}

  /** The refusal of a top-level expression of a plan node, or null if it is within bounds. */
  static String check(Expression expression) {
    return walk(expression, false, new ArrayList<>());
  }

  /** The first function of a plan or an expression that may grow a value, or null. */
  static String growing(Object tree) {
    if (tree instanceof LogicalPlan) {
      LogicalPlan plan = (LogicalPlan) tree;
      for (Iterator<?> parts = plan.expressions().iterator(); parts.hasNext(); ) {
        String found = growing(parts.next());
        if (found != null) {
          return found;
        }
      }
      for (Iterator<?> parts = plan.children().iterator(); parts.hasNext(); ) {
        String found = growing(parts.next());
        if (found != null) {
          return found;
        }
      }
      return null;
    }
    Expression expression = (Expression) tree;
    if (GROWING.contains(expression.getClass().getSimpleName())) {
      return expression.prettyName();
    }
    for (Iterator<?> parts = expression.children().iterator(); parts.hasNext(); ) {
      String found = growing(parts.next());
      if (found != null) {
        return found;
      }
    }
    return null;
  }

  /** Children first: a bounded function's literal arguments hold no sized function when read. */
  private static String walk(Expression expression, boolean inLambda, List<String> sized) {
    boolean lambda = inLambda || expression instanceof LambdaFunction;
    if (expression instanceof ArrayAggregate) {
      String grows = growing(((ArrayAggregate) expression).merge());
      if (grows != null) {
        return grows + " in aggregate's merge function is refused: the value would grow with "
            + "each element";
      }
    }
    if (expression.getClass().getSimpleName().equals("Stack")) {
      String refused = stack(expression);
      if (refused != null) {
        return refused;
      }
    }
    Iterator<Expression> children = expression.children().iterator();
    while (children.hasNext()) {
      String refused = walk(children.next(), lambda, sized);
      if (refused != null) {
        return refused;
      }
    }
    if (!SIZED.contains(expression.getClass().getSimpleName())) {
      return null;
    }
    String name = expression.prettyName();
    if (expression.getClass().getSimpleName().equals("FormatNumber")) {
      return bound(expression, name); // its value is short whatever it is given: it multiplies nothing
    }
    if (!sized.isEmpty()) {
      return name + " with " + sized.get(0) + " in one expression is refused: the size of one "
          + "value would multiply; downstream SQL allows one of " + names() + " per expression";
    }
    if (inLambda) {
      return name + " inside a lambda function is refused: it would make a value per element";
    }
    sized.add(name);
    return bound(expression, name);
  }

  private static String bound(Expression expression, String name) {
    List<Expression> args = new ArrayList<>();
    Iterator<Expression> children = expression.children().iterator();
    while (children.hasNext()) {
      args.add(children.next());
    }
    String kind = expression.getClass().getSimpleName();
    if (kind.equals("Sequence")) {
      return sequence(args, name);
    }
    if (kind.equals("StringReplace")) {
      // Each character of the string may become the whole replacement.
      return atMost(name, "its string's length times its replacement's",
          product(chars(args.get(0)), Math.max(1, chars(args.get(2)))), MAX_CHARS);
    }
    if (kind.equals("FormatString")) {
      return format(args.get(0), name);
    }
    Expression size = literal(args.get(kind.equals("StringSpace") || kind.equals("RandStr") ? 0 : 1));
    if (kind.equals("FormatNumber") && size != null
        && !(size.dataType() instanceof org.apache.spark.sql.types.IntegralType)) {
      return null; // a pattern of the statement's own text, no longer than it
    }
    if (size == null) {
      return name + " with a size from a column is refused: downstream SQL bounds it by a "
          + "literal, so that one value cannot take the server's memory";
    }
    Object value = size.eval(null);
    long count = value == null ? 0 : Math.max(0, ((Number) value).longValue());
    switch (kind) {
      case "StringRepeat":
        return atMost(name, "its count times its string's length",
            product(count, chars(args.get(0))), MAX_CHARS);
      case "ArrayRepeat":
        String refused = atMost(name, "its count", count, MAX_ELEMENTS);
        return refused != null ? refused : atMost(name, "its count times its element's size",
            product(count, chars(args.get(0))), MAX_ARRAY_CHARS);
      case "ArrayInsert": // a position past the end pads the array with nulls up to it
        return atMost(name, "its position",
            value == null ? 0 : Math.abs(((Number) value).longValue()), MAX_ELEMENTS);
      case "FormatNumber":
        return atMost(name, "its decimal places", count, MAX_DECIMALS);
      default: // lpad, rpad, space, randstr: a length
        return atMost(name, "its length", count, MAX_CHARS);
    }
  }

  /** The expression as a literal Spark can evaluate here, or null if a column decides it. */
  private static Expression literal(Expression arg) {
    if (arg.foldable()) {
      return arg;
    }
    if (arg instanceof RuntimeReplaceable) { // to_date('...'): foldable once replaced
      Expression replacement = ((RuntimeReplaceable) arg).replacement();
      return replacement.foldable() ? replacement : null;
    }
    return null;
  }

  private static long product(long a, long b) {
    try {
      return Math.multiplyExact(a, b);
    } catch (ArithmeticException overflow) {
      return Long.MAX_VALUE;
    }
  }

  private static String sequence(List<Expression> args, String name) {
    List<Expression> literals = new ArrayList<>();
    for (Expression arg : args) {
      Expression literal = literal(arg);
      if (literal == null) {
        return name + " with bounds from columns is refused: downstream SQL bounds it by "
            + "literals, at most " + String.format("%,d", MAX_ELEMENTS) + " elements";
      }
      literals.add(literal);
    }
    Object start = literals.get(0).eval(null);
    Object stop = literals.get(1).eval(null);
    Object step = literals.size() > 2 ? literals.get(2).eval(null) : null;
    if (start == null || stop == null) {
      return null;
    }
    DataType type = args.get(0).dataType();
    double span;
    double stride;
    if (type == DateType$.MODULE$) {
      span = Math.abs(((Number) stop).doubleValue() - ((Number) start).doubleValue()) * DAY;
      stride = step == null ? DAY : micros(step);
    } else if (type == TimestampType$.MODULE$ || type == TimestampNTZType$.MODULE$) {
      span = Math.abs(((Number) stop).doubleValue() - ((Number) start).doubleValue());
      stride = step == null ? DAY : micros(step);
    } else {
      span = Math.abs(((Number) stop).doubleValue() - ((Number) start).doubleValue());
      stride = step == null ? 1 : Math.abs(((Number) step).doubleValue());
    }
    if (stride <= 0) {
      return null; // Spark refuses a step of zero itself
    }
    return atMost(name, "its number of elements", (long) Math.min(Long.MAX_VALUE, span / stride + 1),
        MAX_ELEMENTS);
  }

  /** An interval's length in microseconds, a month counted short (28 days) so counts err high. */
  private static double micros(Object step) {
    if (step instanceof CalendarInterval) {
      CalendarInterval interval = (CalendarInterval) step;
      return Math.abs(interval.months * 28 * DAY + interval.days * DAY + interval.microseconds);
    }
    if (step instanceof Integer) {
      return Math.abs((Integer) step * 28 * DAY); // a year-month interval: months
    }
    return Math.abs(((Number) step).doubleValue()); // a day-time interval: microseconds
  }

  /** A literal string's length, or what a column's value is taken to hold. */
  private static long chars(Expression arg) {
    Expression literal = literal(arg);
    if (literal == null) {
      return COLUMN_CHARS;
    }
    Object value = literal.eval(null);
    return value == null ? 0 : Math.max(1, value.toString().length());
  }

  private static String format(Expression format, String name) {
    Expression literal = literal(format);
    if (literal == null) {
      return name + " with a format from a column is refused: downstream SQL bounds its widths";
    }
    Object value = literal.eval(null);
    Matcher spec = WIDTH.matcher(value == null ? "" : value.toString());
    while (spec.find()) {
      Matcher number = NUMBER.matcher(spec.group());
      while (number.find()) {
        String digits = number.group();
        if (digits.length() > 9 || Long.parseLong(digits) > MAX_CHARS) {
          return name + " with a width of " + digits + " is refused: at most "
              + String.format("%,d", MAX_CHARS);
        }
      }
    }
    return null;
  }

  private static String atMost(String name, String what, long value, long bound) {
    if (value <= bound) {
      return null;
    }
    return name + " is refused: " + what + " is " + String.format("%,d", value) + ", and downstream SQL allows at most "
        + String.format("%,d", bound) + " (a literal), so that one value cannot take the "
        + "server's memory";
  }

  /** stack(n, ...) makes n rows: no more than the values it is given. */
  private static String stack(Expression expression) {
    Expression rows = literal(expression.children().head());
    if (rows == null) {
      return "stack with a count from a column is refused";
    }
    Object value = rows.eval(null);
    long count = value == null ? 0 : ((Number) value).longValue();
    long values = expression.children().size() - 1;
    if (count <= Math.max(1, values)) {
      return null;
    }
    return "stack of " + String.format("%,d", count) + " rows from " + values + " values is "
        + "refused: it may make at most as many rows as it is given values";
  }

  private static String names() {
    return "sequence, repeat, array_repeat, lpad, rpad, space, randstr, format_string, "
        + "array_insert, format_number and replace";
  }
}
