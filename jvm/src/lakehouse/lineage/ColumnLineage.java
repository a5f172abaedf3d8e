package lakehouse.lineage;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.Generate;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.Union;

import scala.collection.Iterator;
import scala.collection.Seq;

/**
 * Which input columns each output column of a query is computed from, read off its analyzed
 * plan: OpenLineage's column lineage of a gold model (its direct inputs only: the columns its
 * expression reads, a CASE's conditions included, not those that filter or group the rows). An
 * operator it does not know (an Expand of a rollup, a Python function over rows) leaves the
 * columns it makes without lineage rather than with a guessed one.
 *
 * <p>The inputs are empty relations (leaves), each under a {@code SubqueryAlias} naming its table
 * ({@code lakehouse.observe.lineage}), so the plan is analyzed without reading any data. Every
 * attribute keeps its {@code ExprId} from the relation up; an {@code Alias} (a projection, an
 * aggregate, a window) makes a new one out of the attributes its expression references, a
 * generator's outputs come from its references, and a union's outputs from the same position of
 * every branch.
 */
public final class ColumnLineage {

  private ColumnLineage() {}

  /** One line per output column and input column it comes from: {@code out\ttable\tcolumn}. */
  public static String of(Dataset<?> frame) {
    LogicalPlan plan = frame.queryExecution().analyzed();
    Map<ExprId, Set<String>> sources = new HashMap<>();
    visit(plan, sources);
    StringBuilder lines = new StringBuilder();
    Iterator<Attribute> output = plan.output().iterator();
    while (output.hasNext()) {
      Attribute column = output.next();
      for (String source : sources.getOrDefault(column.exprId(), Set.of())) {
        lines.append(column.name()).append('\t').append(source).append('\n');
      }
    }
    return lines.toString();
  }

  private static void visit(LogicalPlan node, Map<ExprId, Set<String>> sources) {
    Iterator<LogicalPlan> children = node.children().iterator();
    while (children.hasNext()) {
      visit(children.next(), sources);
    }
    if (node instanceof SubqueryAlias alias && alias.child().children().isEmpty()) {
      String table = alias.identifier().name();
      Iterator<Attribute> columns = alias.child().output().iterator();
      while (columns.hasNext()) {
        Attribute column = columns.next();
        sources.put(column.exprId(), new TreeSet<>(Set.of(table + "\t" + column.name())));
      }
    } else if (node instanceof Union union) {
      Seq<Attribute> output = union.output();
      Iterator<LogicalPlan> branches = union.children().iterator();
      while (branches.hasNext()) {
        Seq<Attribute> branch = branches.next().output();
        for (int i = 0; i < output.size(); i++) {
          into(sources, output.apply(i).exprId()).addAll(of(branch.apply(i), sources));
        }
      }
    } else if (node instanceof Generate generate) {
      Set<String> from = of((Expression) generate.generator(), sources);
      Iterator<Attribute> made = generate.generatorOutput().iterator();
      while (made.hasNext()) {
        into(sources, made.next().exprId()).addAll(from);
      }
    }
    Iterator<Expression> expressions = node.expressions().iterator();
    while (expressions.hasNext()) {
      aliases(expressions.next(), sources);
    }
  }

  /** Every alias within {@code expression}, innermost first, as made of what it references. */
  private static void aliases(Expression expression, Map<ExprId, Set<String>> sources) {
    Iterator<Expression> children = expression.children().iterator();
    while (children.hasNext()) {
      aliases(children.next(), sources);
    }
    if (expression instanceof Alias alias) {
      into(sources, alias.exprId()).addAll(of(alias.child(), sources));
    }
  }

  /** The input columns of every attribute {@code expression} references. */
  private static Set<String> of(Expression expression, Map<ExprId, Set<String>> sources) {
    Set<String> found = new TreeSet<>();
    Iterator<Attribute> references = expression.references().iterator();
    while (references.hasNext()) {
      found.addAll(sources.getOrDefault(references.next().exprId(), Set.of()));
    }
    return found;
  }

  private static Set<String> into(Map<ExprId, Set<String>> sources, ExprId id) {
    return sources.computeIfAbsent(id, ignored -> new TreeSet<>());
  }
}
