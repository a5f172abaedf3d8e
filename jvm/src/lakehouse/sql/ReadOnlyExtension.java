package lakehouse.sql;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

import org.apache.spark.internal.config.ConfigEntry;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.QueryPlanningTracker;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.parser.ParameterContext;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.util.StringUtils$;
import org.apache.spark.sql.exceptions.SqlScriptingException;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.execution.command.ShowNamespacesCommand;
import org.apache.spark.sql.internal.SQLConf$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
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
 * <p>Each statement parsed from SQL text, whatever path brought it (a client, the Thrift
 * server's {@code use:database}, {@code EXECUTE IMMEDIATE}'s string), is judged as parsed by
 * {@link BeforeAnalysis} (what the analyzer would evaluate), then analyzed at once and its
 * analyzed plan judged by {@link ReadAllowList} before the parser hands it to Spark: every
 * plan node and every expression must be of a class on the list. Judging the analyzed plan
 * means names computed by {@code IDENTIFIER(...)}, views and substituted parameters are judged
 * as what they resolve to. Judging at the parser, not in a check rule, means only statements
 * are judged: Delta reads a table's log by path with its own plans through the same analyzer.
 */
public final class ReadOnlyExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {

  public static final String KEY = "spark.lakehouse.sql.readOnly";

  /** The databases whose tables downstream SQL may read, comma-separated: the lake's layers. */
  public static final String DATABASES = "spark.lakehouse.sql.databases";

  private static final String SCRIPTS =
      "SQL scripting (BEGIN ... END) is refused: run its statements one by one";

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectParser(
        new AbstractFunction2<SparkSession, ParserInterface, ParserInterface>() {
          @Override
          public ParserInterface apply(SparkSession session, ParserInterface parser) {
            return new Parser(session, parser);
          }
        });
    return BoxedUnit.UNIT;
  }

  static boolean on(SparkSession session) {
    return session.sparkContext().getConf().getBoolean(KEY, false);
  }

  static Set<String> lake(SparkSession session) {
    String databases = session.sparkContext().getConf().get(DATABASES, "");
    return new LinkedHashSet<>(Arrays.asList(databases.toLowerCase(Locale.ROOT).split(",")));
  }

  static RuntimeException refusal(String refusal) {
    // Not an AnalysisException on purpose: CheckAnalysis would append the plan tree to the
    // message, and nothing in Spark/Delta catches this type to try a fallback resolution.
    // PySpark raises it as pyspark.errors.UnsupportedOperationException, str(e) == message.
    return new UnsupportedOperationException("read-only: " + refusal);
  }

  /** Spark's (and Delta's) parser, judging each statement parsed from SQL text. */
  static final class Parser implements ParserInterface {
    private final SparkSession session;
    private final ParserInterface parser;

    Parser(SparkSession session, ParserInterface parser) {
      this.session = session;
      this.parser = parser;
    }

    private LogicalPlan judged(String sqlText, ParameterContext parameters)
        throws ParseException {
      if (!on(session)) {
        return parameters == null ? parser.parsePlan(sqlText)
            : parser.parsePlanWithParameters(sqlText, parameters);
      }
      if (sqlText.contains("${")) {
        // Substitution is off (spark.sql.variable.substitute=false); said rather than left to
        // answer with the text as written, which would look like a failed secret.
        throw refusal("${...} is refused: downstream SQL substitutes no variables (they would "
            + "read the server's settings and environment)");
      }
      LogicalPlan parsed;
      try {
        parsed = parameters == null ? parser.parsePlan(sqlText)
            : parser.parsePlanWithParameters(sqlText, parameters);
      } catch (Exception error) {
        // spark.sql.scripting.enabled=false: Spark's line would tell the client to set it.
        if (error instanceof SqlScriptingException) {
          throw refusal(SCRIPTS);
        }
        throw ReadOnlyExtension.<RuntimeException>rethrown(error);
      }
      if (parsed.getClass().getSimpleName().startsWith("Compound")) {
        throw refusal(SCRIPTS);
      }
      String early = BeforeAnalysis.refusal(parsed);
      if (early != null) {
        throw refusal(early);
      }
      LogicalPlan statement = onlyTheSettableSettings(onlyTheLakesDatabases(parsed));
      LogicalPlan analyzed = analyze(session, statement);
      String refused = new ReadAllowList(session, lake(session)).plan(analyzed);
      if (refused != null) {
        throw refusal(refused);
      }
      return statement;
    }

    /** SHOW DATABASES [LIKE p] lists those of the lake (that match p), not the metastore's. */
    private LogicalPlan onlyTheLakesDatabases(LogicalPlan parsed) {
      if (!(parsed instanceof ShowNamespacesCommand)) {
        return parsed;
      }
      ShowNamespacesCommand show = (ShowNamespacesCommand) parsed;
      Seq<String> lake = CollectionConverters.asScala(new ArrayList<>(lake(session))).toSeq();
      Seq<String> shown = show.pattern().isDefined()
          ? StringUtils$.MODULE$.filterPattern(lake, show.pattern().get()) : lake;
      // An empty alternative matches no database: a pattern the lake does not meet lists none.
      String pattern = shown.isEmpty() ? "" : shown.mkString("|");
      return new ShowNamespacesCommand(show.child(), Option.apply(pattern), show.output());
    }

    /**
     * SET and SET -v list the settings a session may set, with their values (and, for -v,
     * what each means), never the server's: those may hold what no client should read.
     */
    private LogicalPlan onlyTheSettableSettings(LogicalPlan parsed) {
      if (!(parsed instanceof SetCommand)) {
        return parsed;
      }
      SetCommand set = (SetCommand) parsed;
      boolean verbose = set.kv().isDefined() && set.kv().get()._1().trim().equals("-v")
          && set.kv().get()._2().isEmpty();
      if (set.kv().isDefined() && !verbose) {
        return parsed;
      }
      List<InternalRow> rows = new ArrayList<>();
      for (String key : ClientSettings.KEYS) {
        String value = session.sessionState().conf().getConfString(key); // set, or the default
        List<Object> cells = new ArrayList<>(Arrays.asList(
            UTF8String.fromString(key), UTF8String.fromString(value)));
        if (verbose) {
          ConfigEntry<?> entry = SQLConf$.MODULE$.getConfigEntry(key);
          cells.add(UTF8String.fromString(entry == null ? "" : entry.doc()));
          cells.add(UTF8String.fromString(entry == null ? "" : entry.version()));
        }
        rows.add(new GenericInternalRow(cells.toArray()));
      }
      return new LocalRelation(set.output(), CollectionConverters.asScala(rows).toSeq(), false,
          Option.empty());
    }

    @Override
    public LogicalPlan parsePlan(String sqlText) throws ParseException {
      return judged(sqlText, null);
    }

    @Override
    public LogicalPlan parsePlanWithParameters(String sqlText, ParameterContext parameters)
        throws ParseException {
      return judged(sqlText, parameters);
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
      // A view's text, parsed while its reader is analyzed: judged inside that reader's plan.
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

  /** Scala's unchecked throws, from Java: the parser's own errors go on as they are. */
  @SuppressWarnings("unchecked")
  private static <E extends Exception> E rethrown(Exception error) throws E {
    throw (E) error;
  }

  /** A plan analyzed as Spark will analyze it before running it (errors are Spark's own). */
  static LogicalPlan analyze(SparkSession session, LogicalPlan plan) {
    return session.sessionState().analyzer()
        .executeAndCheck(plan, new QueryPlanningTracker(Option.empty()));
  }
}
