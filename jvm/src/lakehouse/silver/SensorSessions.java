package lakehouse.silver;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import lakehouse.silver.SessionMachine.Clock;
import lakehouse.silver.SessionMachine.Lineage;
import lakehouse.silver.SessionMachine.Output;
import lakehouse.silver.SessionMachine.Record;
import lakehouse.silver.SessionMachine.RowChange;
import lakehouse.silver.SessionMachine.SessionState;
import lakehouse.silver.SessionMachine.Status;
import lakehouse.silver.SessionMachine.Transition;
import lakehouse.silver.SessionMachine.Violation;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Silver's stateful processor: each sensor's sessions, held in Spark's state store and judged
 * record by record, in Kafka order, by {@link SessionMachine}; the JVM form of
 * {@code silver/processor.py} and {@code silver/session_batch.py}, which {@code
 * silver/reconstruct.py} calls through {@link #reconstruct}.
 *
 * <p>Input: one row per bronze record, keyed by session ({@code silver.parsing}): a plain
 * record's typed fields and rows ({@code items}), the protocol's reading of any other
 * ({@code reading}, JSON made by the Python protocol, with its bytes in {@code value}).
 * Output: rows of {@code silver.outputs.SCHEMA}, each a row of one silver table.
 */
public final class SensorSessions extends StatefulProcessor<String, Row, Row> {
  public static final String UNKEYED = "";
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Pattern INCARNATION = Pattern.compile("~([0-9]+)$");

  /** One integrity rule: topics matching {@code topics} are judged in this mode. */
  record Rule(Pattern topics, SessionMachine.Mode mode, SessionMachine.Policy policy, int window)
      implements Serializable {}

  private final List<Rule> rules;
  private final String topicPrefix;
  /** Null: no trace; empty: every session; else ids, as {@code session_id} or {@code sensor/id}. */
  private final Set<String> trace;
  private final Clock clock;
  private final long rowsPerSession, sessionsPerSensor, sessionsWithoutSnapshot;
  private final StructType outputSchema, stateSchema, sensorSchema;
  private final List<String> valueNames;
  private final int stateVersion;
  private final String changes, violations, transitions, sessions;

  private transient MapState<String, Row> held;
  private transient ValueState<Row> holding;
  private transient Map<String, Integer> in;
  private transient Map<String, Integer> out;

  /**
   * @param rules one rule a line, {@code topics<TAB>mode<TAB>policy<TAB>window}, first match wins
   * @param trace null, or session ids one a line (none: every session)
   * @param tables the tables of {@code silver.row_changes}, {@code violations}, {@code
   *     state_transitions} and {@code sessions}, the names output rows carry
   */
  public SensorSessions(String rules, String topicPrefix, String trace, long timeoutMs,
      long rowsPerSession, long sessionsPerSensor, long sessionsWithoutSnapshot,
      String outputSchema, String stateSchema, String sensorSchema, String valueNames,
      int stateVersion, String tables) {
    this.rules = new ArrayList<>();
    for (String line : rules.split("\n")) {
      if (line.isEmpty()) continue;
      String[] f = line.split("\t");
      this.rules.add(new Rule(Pattern.compile(f[0]),
          SessionMachine.Mode.valueOf(f[1].toUpperCase(Locale.ROOT)),
          SessionMachine.Policy.valueOf(f[2].toUpperCase(Locale.ROOT)), Integer.parseInt(f[3])));
    }
    this.topicPrefix = topicPrefix;
    this.trace = trace == null ? null : new HashSet<>();
    if (trace != null) for (String id : trace.split("\n")) if (!id.isEmpty()) this.trace.add(id);
    this.clock = new Clock(timeoutMs);
    this.rowsPerSession = rowsPerSession;
    this.sessionsPerSensor = sessionsPerSensor;
    this.sessionsWithoutSnapshot = sessionsWithoutSnapshot;
    this.outputSchema = StructType.fromDDL(outputSchema);
    this.stateSchema = StructType.fromDDL(stateSchema);
    this.sensorSchema = StructType.fromDDL(sensorSchema);
    this.valueNames = List.of(valueNames.split(","));
    this.stateVersion = stateVersion;
    String[] names = tables.split(",");
    changes = names[0];
    violations = names[1];
    transitions = names[2];
    sessions = names[3];
  }

  /** The processor's outputs over {@code keyed}, grouped by sensor, on the data's clock. */
  public static Dataset<Row> reconstruct(Dataset<Row> keyed, SensorSessions processor) {
    return keyed
        .groupByKey((MapFunction<Row, String>) r -> r.getAs("sensor_id"), Encoders.STRING())
        .transformWithState(processor, TimeMode.EventTime(), OutputMode.Append(),
            Encoders.row(processor.outputSchema));
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    StatefulProcessorHandle handle = getHandle();
    held = handle.getMapState("sessions", Encoders.STRING(), Encoders.row(stateSchema),
        TTLConfig.NONE());
    holding = handle.getValueState("sensor", Encoders.row(sensorSchema), TTLConfig.NONE());
    out = new HashMap<>();
    for (String name : outputSchema.fieldNames()) out.put(name, outputSchema.fieldIndex(name));
  }

  private SessionMachine machineFor(String sensor, String sessionId) {
    String topic = topicPrefix + sensor;
    Rule rule = null;
    for (Rule r : rules) {
      if (r.topics().matcher(topic).matches()) {
        rule = r;
        break;
      }
    }
    if (rule == null) {
      rule = new Rule(null, SessionMachine.Mode.STRICT, SessionMachine.Policy.QUARANTINE, 100);
    }
    boolean traced = trace != null
        && (trace.isEmpty() || trace.contains(sessionId) || trace.contains(sensor + "/" + sessionId));
    return new SessionMachine(rule.mode(), rule.policy(), rule.window(), traced, rowsPerSession);
  }

  // -- the sensor's rows of a micro-batch --------------------------------------------------

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      String sensor, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    List<Row> batch = new ArrayList<>();
    CollectionConverters.asJava(rows).forEachRemaining(batch::add);
    if (in == null) {
      in = new HashMap<>();
      StructType schema = batch.get(0).schema();
      for (String name : schema.fieldNames()) in.put(name, schema.fieldIndex(name));
    }
    // Spark hands a key's rows over in no order; Kafka (partition, offset) is the order the
    // sensor sent them in, a re-created topic's after the old one's (`TOPIC~N`).
    int topic = in.get("topic"), partition = in.get("partition"), offset = in.get("offset");
    batch.sort(Comparator.<Row>comparingInt(r -> incarnation(r.getString(topic)))
        .thenComparingInt(r -> r.getInt(partition))
        .thenComparingLong(r -> r.getLong(offset)));
    long now = timerValues.getCurrentWatermarkInMs();
    long[] counts = holdingCounts();
    long heldCount = counts[0], without = counts[1];
    List<Row> emitted = new ArrayList<>();
    List<Long> deadlines = new ArrayList<>();
    Map<List<String>, List<Record>> refused = new LinkedHashMap<>();
    // Sessions in the order of their first record: who meets a bound first is decided by
    // the data, not by the order of a hash.
    Map<String, List<Row>> bySession = new LinkedHashMap<>();
    int session = in.get("session_id");
    for (Row r : batch) bySession.computeIfAbsent(r.getString(session), k -> new ArrayList<>()).add(r);
    for (Map.Entry<String, List<Row>> entry : bySession.entrySet()) {
      String sessionId = entry.getKey();
      List<Record> records = new ArrayList<>();
      for (Row r : entry.getValue()) records.add(record(r, sessionId, sensor));
      if (sessionId.equals(UNKEYED)) {
        emit(emitted, unkeyed(records), null);
        continue;
      }
      Row found = held.getValue(sessionId);
      SessionState state;
      if (found == null) {
        Row first = entry.getValue().get(0);
        boolean opens = first.getBoolean(in.get("plain")) && "snapshot".equals(records.get(0).kind);
        String[] refusal = refusal(opens, heldCount, without);
        if (refusal != null) {
          refused.computeIfAbsent(List.of(refusal), k -> new ArrayList<>()).addAll(records);
          continue;
        }
        state = new SessionState(sessionId, sensor);
      } else {
        state = load(found);
      }
      boolean before = state.hasSnapshot;
      SessionMachine machine = machineFor(sensor, sessionId);
      SessionState judged = judge(machine, state, records, sensor, emitted);
      if (judged == null) continue; // its state stays as it was
      state = judged;
      Output expired = new Output();
      boolean kept = clock.advance(machine, state, now, expired);
      emit(emitted, expired, state);
      if (found == null) {
        if (!kept || (!state.hasSnapshot && without >= sessionsWithoutSnapshot)) {
          continue; // judged, but not held: a snapshot it opened with was refused
        }
        heldCount++;
        without += state.hasSnapshot ? 0 : 1;
      } else if (!kept) {
        heldCount--;
        without -= before ? 0 : 1;
        held.removeKey(sessionId);
        continue;
      } else {
        without += (before ? 1 : 0) - (state.hasSnapshot ? 1 : 0);
      }
      held.updateValue(sessionId, save(state));
      deadlines.add(clock.deadline(state));
    }
    // A flood of sessions a bound keeps out is rejected in one frame per reason.
    for (Map.Entry<List<String>, List<Record>> entry : refused.entrySet()) {
      Output rejected = new Output();
      for (Record r : entry.getValue()) {
        rejected.violations.add(new Violation(r.sessionId, sensor, entry.getKey().get(0),
            entry.getKey().get(1), null, r.seq, r.lineage, r.raw));
      }
      emit(emitted, rejected, null);
    }
    holding.update(RowFactory.create(heldCount, without));
    wakeAt(deadlines, now);
    return CollectionConverters.asScala(emitted.iterator());
  }

  private static int incarnation(String topic) {
    Matcher m = INCARNATION.matcher(topic);
    return m.find() ? Integer.parseInt(m.group(1)) : 1;
  }

  private long[] holdingCounts() {
    Row found = holding.get();
    return found == null ? new long[] {0, 0} : new long[] {found.getLong(0), found.getLong(1)};
  }

  /** Why a session the sensor does not hold yet is kept out, if a bound says so. */
  private String[] refusal(boolean opens, long heldCount, long without) {
    if (heldCount >= sessionsPerSensor) {
      return new String[] {SessionMachine.SESSIONS_BOUND,
          "the sensor holds as many sessions as silver.bounds.sessions_per_sensor ("
              + thousands(sessionsPerSensor) + ")"};
    }
    if (!opens && without >= sessionsWithoutSnapshot) {
      return new String[] {SessionMachine.NO_SNAPSHOT_BOUND,
          "the sensor holds as many sessions without a snapshot as "
              + "silver.bounds.sessions_without_snapshot (" + thousands(sessionsWithoutSnapshot)
              + ")"};
    }
    return null;
  }

  private static String thousands(long n) {
    return String.format(Locale.ROOT, "%,d", n);
  }

  /**
   * The session's outputs for its records of the batch, emitted; the state they leave (a new
   * session where a record came after the old one's tombstone), or null where they could not
   * be judged (the state then stays as it was). The session's clock moves with its records:
   * where one comes later than the session's deadline, the session expires (or its tombstone
   * goes) before that record is judged, as it would have in a batch of its own.
   */
  private SessionState judge(SessionMachine machine, SessionState state, List<Record> records,
      String sensor, List<Row> emitted) {
    List<List<Row>> parts = new ArrayList<>();
    try {
      for (List<Record> part : byClock(records, state)) {
        Output expired = new Output();
        if (!clock.advance(machine, state, part.get(0).kafkaTime, expired)) {
          state = new SessionState(state.sessionId, state.sensorId);
        }
        List<Row> frames = new ArrayList<>();
        if (!expired.violations.isEmpty()) emit(frames, expired, null);
        emit(frames, machine.process(state, part), null);
        for (Record r : part) state.heardAt(r.kafkaTime);
        parts.add(frames);
      }
    } catch (IntegrityError error) {
      throw error;
    } catch (RuntimeException error) {
      String detail = truncate("handling the session's batch failed: "
          + error.getClass().getSimpleName() + ": " + error.getMessage());
      if (machine.policy == SessionMachine.Policy.FAIL) {
        throw new IntegrityError("session " + state.sessionId + ": " + detail);
      }
      Output failed = new Output();
      for (Record r : records) {
        failed.violations.add(new Violation(r.sessionId, sensor, SessionMachine.INTERNAL, detail,
            null, r.seq, r.lineage, r.raw));
      }
      emit(emitted, failed, null);
      return null;
    }
    latestAcross(parts);
    for (List<Row> frames : parts) emitted.addAll(frames);
    return state;
  }

  private static String truncate(String text) {
    return text.length() <= 500 ? text : text.substring(0, 500);
  }

  /**
   * The records cut before every one that comes more than the timeout after all before it:
   * only there can the session expire or its tombstone go.
   */
  private List<List<Record>> byClock(List<Record> records, SessionState state) {
    List<List<Record>> parts = new ArrayList<>();
    List<Record> part = new ArrayList<>();
    long before = state.lastTime == null ? 0 : state.lastTime;
    for (Record r : records) {
      if (r.kafkaTime > 0 && before > 0 && r.kafkaTime > before + clock.timeoutMs() && !part.isEmpty()) {
        parts.add(part);
        part = new ArrayList<>();
      }
      before = Math.max(before, r.kafkaTime);
      part.add(r);
    }
    parts.add(part);
    return parts;
  }

  /**
   * A row's last change in the batch marked {@code latest}: by (seq, offset, ordinal) within
   * a part, and in the last part that changed it only (a session reborn within the batch,
   * its tombstone forgotten, changes rows the old one changed too).
   */
  private void latestAcross(List<List<Row>> parts) {
    int output = out.get("output"), rowId = out.get("row_id"), seq = out.get("seq"),
        offset = out.get("offset"), ordinal = out.get("ordinal"), latest = out.get("latest");
    Set<String> later = new HashSet<>();
    for (int p = parts.size() - 1; p >= 0; p--) {
      List<Row> frames = parts.get(p);
      Map<String, Integer> best = new HashMap<>();
      for (int i = 0; i < frames.size(); i++) {
        Row r = frames.get(i);
        if (!changes.equals(r.getString(output))) continue;
        Integer j = best.get(r.getString(rowId));
        if (j == null || rank(r, seq, offset, ordinal).compareTo(rank(frames.get(j), seq, offset, ordinal)) > 0) {
          best.put(r.getString(rowId), i);
        }
      }
      for (Map.Entry<String, Integer> e : best.entrySet()) {
        if (later.contains(e.getKey())) continue;
        Row r = frames.get(e.getValue());
        Object[] values = new Object[r.length()];
        for (int k = 0; k < values.length; k++) values[k] = r.get(k);
        values[latest] = true;
        frames.set(e.getValue(), RowFactory.create(values));
      }
      later.addAll(best.keySet());
    }
  }

  private record Rank(long seq, long offset, long ordinal) implements Comparable<Rank> {
    @Override
    public int compareTo(Rank o) {
      int c = Long.compare(seq, o.seq);
      if (c == 0) c = Long.compare(offset, o.offset);
      return c != 0 ? c : Long.compare(ordinal, o.ordinal);
    }
  }

  private static Rank rank(Row r, int seq, int offset, int ordinal) {
    return new Rank(r.getLong(seq), r.getLong(offset), r.getLong(ordinal));
  }

  private Output unkeyed(List<Record> records) {
    Output rejected = new Output();
    for (Record r : records) {
      String reason = r.problem == null ? SessionMachine.INVALID : r.problem;
      String detail = r.detail == null ? "no session_id" : r.detail;
      rejected.violations.add(
          new Violation(null, r.sensorId, reason, detail, null, null, r.lineage, r.raw));
    }
    return rejected;
  }

  // -- timers ------------------------------------------------------------------------------

  /**
   * The watermark passed the earliest deadline among the sensor's sessions: move every one to
   * it (a scan of what the sensor holds, which its bounds keep small).
   */
  @Override
  public scala.collection.Iterator<Row> handleExpiredTimer(
      String sensor, TimerValues timerValues, ExpiredTimerInfo expiredTimerInfo) {
    long now = timerValues.getCurrentWatermarkInMs();
    long[] counts = holdingCounts();
    long heldCount = counts[0], without = counts[1];
    List<Row> emitted = new ArrayList<>();
    List<Long> deadlines = new ArrayList<>();
    int deadline = stateSchema.fieldIndex("deadline");
    List<Tuple2<String, Row>> all = new ArrayList<>();
    CollectionConverters.asJava(held.iterator()).forEachRemaining(all::add);
    for (Tuple2<String, Row> entry : all) {
      String sessionId = entry._1();
      Row found = entry._2();
      if (found.getLong(deadline) >= now) { // nothing happens to it yet
        deadlines.add(found.getLong(deadline));
        continue;
      }
      SessionState state = load(found);
      Status status = state.status;
      Output expired = new Output();
      boolean kept = clock.advance(machineFor(sensor, sessionId), state, now, expired);
      if (state.status != status) emit(emitted, expired, state); // expired, maybe forgotten
      if (kept) {
        held.updateValue(sessionId, save(state));
        deadlines.add(clock.deadline(state));
      } else {
        heldCount--;
        without -= state.hasSnapshot ? 0 : 1;
        held.removeKey(sessionId);
      }
    }
    holding.update(RowFactory.create(heldCount, without));
    wakeAt(deadlines, now);
    return CollectionConverters.asScala(emitted.iterator());
  }

  /**
   * Keep one timer per sensor, at its earliest deadline. A timer below the watermark {@code
   * now} fires in this batch and is then deleted by Spark: it does not count.
   */
  private void wakeAt(List<Long> deadlines, long now) {
    if (deadlines.isEmpty()) return;
    long deadline = deadlines.stream().mapToLong(Long::longValue).min().getAsLong();
    List<Long> timers = new ArrayList<>();
    CollectionConverters.asJava(getHandle().listTimers()).forEachRemaining(t -> timers.add((Long) t));
    timers.removeIf(t -> t < now);
    if (!timers.isEmpty() && timers.stream().mapToLong(Long::longValue).min().getAsLong() <= deadline) {
      return;
    }
    for (long timer : timers) getHandle().deleteTimer(timer);
    getHandle().registerTimer(deadline);
  }

  // -- state -------------------------------------------------------------------------------

  /** A held session: a few plain columns beside its body, readable by `lakehouse inspect`. */
  private Row save(SessionState state) {
    Object[] values = new Object[stateSchema.size()];
    values[0] = stateVersion;
    values[1] = state.status.toString();
    values[2] = state.lastSeq;
    values[3] = state.tableRows();
    values[4] = state.records;
    values[5] = state.hasSnapshot;
    values[6] = clock.deadline(state);
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream stream = new ObjectOutputStream(bytes)) {
      stream.writeObject(state);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    values[7] = bytes.toByteArray();
    return RowFactory.create(values);
  }

  private SessionState load(Row row) {
    int version = row.getInt(0);
    if (version != stateVersion) {
      throw new IllegalStateException("STATE_VERSION_MISMATCH: the checkpoint holds silver state "
          + "version " + version + ", this code reads version " + stateVersion
          + ": lakehouse run silver --full-refresh");
    }
    try (ObjectInputStream stream =
        new ObjectInputStream(new ByteArrayInputStream((byte[]) row.get(7)))) {
      return (SessionState) stream.readObject();
    } catch (IOException | ClassNotFoundException e) {
      throw new IllegalStateException("the silver checkpoint holds state this code cannot read ("
          + e + "): lakehouse run silver --full-refresh", e);
    }
  }

  // -- records in, rows out ----------------------------------------------------------------

  /** A record for the machine: typed from the JVM's columns, or as the protocol read it. */
  private Record record(Row r, String sessionId, String sensor) {
    Record record = new Record();
    record.lineage = new Lineage(r.getString(in.get("topic")), r.getInt(in.get("partition")),
        r.getLong(in.get("offset")));
    record.kafkaTime = r.getLong(in.get("kafka_time"));
    record.sessionId = sessionId;
    if (!r.getBoolean(in.get("plain"))) {
      record.raw = (byte[]) r.get(in.get("value"));
      read(record, r.getString(in.get("reading")));
      return record;
    }
    record.sensorId = sensor;
    record.seq = r.getLong(in.get("seq"));
    record.kind = r.getString(in.get("kind"));
    record.eventTime = r.getLong(in.get("event_time"));
    record.op = r.getString(in.get("op"));
    List<Row> items = r.getList(in.get("items"));
    if ("snapshot".equals(record.kind)) {
      record.rows = new LinkedHashMap<>();
      for (Row item : items) record.rows.put(item.getString(0), values(item.getStruct(1)));
    } else if ("update".equals(record.kind)) {
      record.rowId = items.get(0).getString(0);
      if ("upsert".equals(record.op)) record.values = values(items.get(0).getStruct(1));
    }
    return record;
  }

  private Map<String, Object> values(Row row) {
    Map<String, Object> found = new LinkedHashMap<>();
    for (int i = 0; i < valueNames.size(); i++) found.put(valueNames.get(i), row.get(i));
    return found;
  }

  /** The Python protocol's reading of a record that is not plain (`silver.parsing`). */
  private void read(Record record, String reading) {
    JsonNode read;
    try {
      read = JSON.readTree(reading);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    record.problem = text(read, "problem");
    record.detail = text(read, "detail");
    if (record.problem != null) return;
    record.sensorId = text(read, "sensor_id");
    record.seq = read.get("seq").asLong();
    record.kind = text(read, "kind");
    record.eventTime = read.get("event_time").asLong();
    record.op = text(read, "op");
    record.rowId = text(read, "row_id");
    if (read.hasNonNull("values")) record.values = values(read.get("values"));
    if (read.hasNonNull("rows")) {
      record.rows = new LinkedHashMap<>();
      for (JsonNode pair : read.get("rows")) record.rows.put(pair.get(0).asText(), values(pair.get(1)));
    }
  }

  private static String text(JsonNode node, String name) {
    JsonNode found = node.get(name);
    return found == null || found.isNull() ? null : found.asText();
  }

  private Map<String, Object> values(JsonNode node) {
    Map<String, Object> found = new LinkedHashMap<>();
    for (String name : valueNames) {
      JsonNode value = node.get(name);
      DataType type = outputSchema.apply(name).dataType();
      if (value == null || value.isNull()) found.put(name, null);
      else if (type.equals(DataTypes.LongType)) found.put(name, value.asLong());
      else if (type.equals(DataTypes.DoubleType)) found.put(name, value.asDouble());
      else found.put(name, value.asText());
    }
    return found;
  }

  /**
   * The machine's output as rows of the silver tables, the session's summary last. Each
   * table's rows are numbered ({@code ordinal}) in the order their Kafka record produced
   * them: a number that does not depend on how records were cut into micro-batches.
   */
  private void emit(List<Row> rows, Output output, SessionState session) {
    Map<List<Object>, Long> produced = new HashMap<>();
    for (RowChange c : output.changes) {
      Object[] row = row(changes, c.sessionId(), c.sensorId(), c.lineage(), produced);
      row[out.get("latest")] = false;
      row[out.get("row_id")] = c.rowId();
      row[out.get("op")] = c.op();
      if (c.values() != null) {
        for (String name : valueNames) row[out.get(name)] = typed(name, c.values().get(name));
      }
      row[out.get("seq")] = c.seq();
      row[out.get("event_time")] = c.eventTime();
      rows.add(RowFactory.create(row));
    }
    for (Violation v : output.violations) {
      Object[] row = row(violations, v.sessionId(), v.sensorId(), v.lineage(), produced);
      Map<String, Object> other = new LinkedHashMap<>();
      other.put("reason", v.reason());
      other.put("detail", v.detail());
      other.put("expected_seq", v.expectedSeq());
      other.put("found_seq", v.foundSeq());
      other.put("raw_value", v.raw());
      row[out.get("other")] = json(other);
      rows.add(RowFactory.create(row));
    }
    for (Transition t : output.transitions) {
      Object[] row = row(transitions, t.sessionId(), t.sensorId(), t.lineage(), produced);
      row[out.get("seq")] = t.seq();
      Map<String, Object> other = new LinkedHashMap<>();
      other.put("action", t.action());
      other.put("before", summary(t.before()));
      other.put("after", summary(t.after()));
      row[out.get("other")] = json(other);
      rows.add(RowFactory.create(row));
    }
    if (session != null) {
      Object[] row = row(sessions, session.sessionId, session.sensorId, session.lastLineage, produced);
      row[out.get("status")] = session.status.toString();
      Map<String, Object> other = new LinkedHashMap<>();
      other.put("first_seq", session.firstSeq);
      other.put("last_seq", session.lastSeq);
      other.put("records", session.records);
      other.put("snapshots", session.snapshots);
      other.put("updates", session.updates);
      other.put("rejected", session.rejected);
      other.put("gaps", session.gaps);
      other.put("table_rows", session.tableRows());
      other.put("first_event_time", session.firstEventTime);
      other.put("last_event_time", session.lastEventTime);
      Lineage first = session.firstLineage;
      other.put("first_topic", first == null ? null : first.topic());
      other.put("first_partition", first == null ? null : first.partition());
      other.put("first_offset", first == null ? null : first.offset());
      row[out.get("other")] = json(other);
      rows.add(RowFactory.create(row));
    }
  }

  private Object[] row(String table, String sessionId, String sensorId, Lineage lineage,
      Map<List<Object>, Long> produced) {
    Object[] row = new Object[outputSchema.size()];
    row[out.get("output")] = table;
    row[out.get("session_id")] = sessionId;
    row[out.get("sensor_id")] = sensorId;
    List<Object> record = new ArrayList<>(4);
    record.add(table);
    if (lineage != null) {
      row[out.get("topic")] = lineage.topic();
      row[out.get("partition")] = lineage.partition();
      row[out.get("offset")] = lineage.offset();
      record.add(lineage.topic());
      record.add(lineage.partition());
      record.add(lineage.offset());
    }
    long ordinal = produced.merge(record, 1L, Long::sum) - 1;
    row[out.get("ordinal")] = ordinal;
    return row;
  }

  private Object typed(String name, Object value) {
    if (value == null) return null;
    DataType type = outputSchema.apply(name).dataType();
    if (type.equals(DataTypes.LongType)) return ((Number) value).longValue();
    if (type.equals(DataTypes.DoubleType)) return ((Number) value).doubleValue();
    return value;
  }

  private static String json(Map<String, Object> value) {
    try {
      return JSON.writeValueAsString(value);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** A trace's summary as Python's {@code json.dumps} writes it, the text the table keeps. */
  private static String summary(Map<String, Object> summary) {
    StringBuilder text = new StringBuilder("{");
    for (Map.Entry<String, Object> e : summary.entrySet()) {
      if (text.length() > 1) text.append(", ");
      text.append('"').append(e.getKey()).append("\": ");
      Object v = e.getValue();
      text.append(v == null ? "null" : v instanceof String ? "\"" + v + "\"" : v.toString());
    }
    return text.append('}').toString();
  }

  @Override
  public void close() {}
}
