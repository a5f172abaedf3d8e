package lakehouse.silver;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Silver's per-session state machine in the JVM: {@code silver/session_machine.py}, which
 * stays its executable specification (a property test runs both on the same records and
 * requires equal outputs and states). One session's records in Kafka order rebuild its table
 * from snapshot and updates, with {@code seq} checked as the session's integrity mode demands.
 * Names, reasons and the text of every detail are the Python machine's.
 */
public final class SessionMachine implements Serializable {
  public enum Mode { STRICT, ORDERED, WINDOW, ONCE, NONE }

  public enum Policy { FAIL, QUARANTINE }

  public enum Status {
    OPEN, CLOSED, EXPIRED, BROKEN;

    @Override
    public String toString() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /** Why a record is rejected: the values of the Python machine's {@code Reason}. */
  public static final String UNPARSABLE = "unparsable", INVALID = "invalid",
      UNKNOWN_KIND = "unknown_kind", GAP = "gap", DUPLICATE = "duplicate",
      OUT_OF_ORDER = "out_of_order", UPDATE_BEFORE_SNAPSHOT = "update_before_snapshot",
      UNKNOWN_ROW = "unknown_row", AFTER_END = "after_end", QUARANTINED = "quarantined",
      ROWS_BOUND = "rows_bound", SESSIONS_BOUND = "sessions_bound",
      NO_SNAPSHOT_BOUND = "no_snapshot_bound", INTERNAL = "internal";

  /** Row ids in Python's order (by code point), which differs from Java's for astral ones. */
  public static final Comparator<String> CODE_POINTS =
      (Comparator<String> & Serializable)
          (a, b) -> {
            int i = 0, j = 0;
            while (i < a.length() && j < b.length()) {
              int x = a.codePointAt(i), y = b.codePointAt(j);
              if (x != y) return Integer.compare(x, y);
              i += Character.charCount(x);
              j += Character.charCount(y);
            }
            return Integer.compare(a.length() - i, b.length() - j);
          };

  /** Where a record came from: the Kafka record bronze kept. */
  public record Lineage(String topic, int partition, long offset) implements Serializable {}

  /** One bronze record of a session, parsed as far as it goes. */
  public static final class Record implements Serializable {
    /** Fixed: a session held in a checkpoint stays readable by code that adds a method. */
    private static final long serialVersionUID = 1L;

    public Lineage lineage;
    /** Null where the JVM read the record: a violation's bytes are then looked up in bronze. */
    public byte[] raw;
    public String sessionId, sensorId, kind, op, rowId, problem, detail;
    public Long seq;
    /** Microseconds since the epoch, UTC. */
    public Long eventTime;
    public Map<String, Object> values;
    /** Its Kafka timestamp (ms; 0: none), the session's clock. */
    public long kafkaTime;
    /** A snapshot's rows, in the message's order. */
    public LinkedHashMap<String, Map<String, Object>> rows;

    public Record() {}

    /** As the Python machine's {@code Record} is made, numbers of any width. */
    public Record(Lineage lineage, byte[] raw, String sessionId, String sensorId, Number seq,
        String kind, Number eventTime, String op, String rowId, Map<String, Object> values,
        LinkedHashMap<String, Map<String, Object>> rows, String problem, String detail) {
      this.lineage = lineage;
      this.raw = raw;
      this.sessionId = sessionId;
      this.sensorId = sensorId;
      this.seq = seq == null ? null : seq.longValue();
      this.kind = kind;
      this.eventTime = eventTime == null ? null : eventTime.longValue();
      this.op = op;
      this.rowId = rowId;
      this.values = values;
      this.rows = rows;
      this.problem = problem;
      this.detail = detail;
    }
  }

  /** One row of one session's table changed by an accepted record. */
  public record RowChange(
      String sessionId, String sensorId, String rowId, String op, Map<String, Object> values,
      long seq, Long eventTime, Lineage lineage) implements Serializable {}

  /** One rejected record and why. */
  public record Violation(
      String sessionId, String sensorId, String reason, String detail, Long expectedSeq,
      Long foundSeq, Lineage lineage, byte[] raw) implements Serializable {
    /**
     * {@code record} rejected (or found after a gap) in {@code state}'s session: the session's
     * sensor, or the record's where the session has not named one yet.
     */
    static Violation of(SessionState state, Record record, String reason, String detail,
        Long expected) {
      String sensor = state.sensorId != null ? state.sensorId : record.sensorId;
      return new Violation(state.sessionId, sensor, reason, detail, expected, record.seq,
          record.lineage, record.raw);
    }
  }

  /** Trace: the session before and after one record. */
  public record Transition(
      String sessionId, String sensorId, String action, Map<String, Object> before,
      Map<String, Object> after, Long seq, Lineage lineage) implements Serializable {}

  /** What records did to a session. */
  public static final class Output implements Serializable {
    public final List<RowChange> changes = new ArrayList<>();
    public final List<Violation> violations = new ArrayList<>();
    public final List<Transition> transitions = new ArrayList<>();
  }

  /** Everything silver remembers about one live session between micro-batches. */
  public static final class SessionState implements Serializable {
    /** Fixed: a session held in a checkpoint stays readable by code that adds a method. */
    private static final long serialVersionUID = 1L;

    public String sessionId, sensorId;
    public Status status = Status.OPEN;
    public Long lastSeq, firstSeq, brokenAtSeq, firstEventTime, lastEventTime, rowsAtEnd, lastTime;
    public boolean hasSnapshot;
    /** The rows the session's table holds now; their values live in silver's tables. */
    public Set<String> rowIds = new HashSet<>();
    public long records, snapshots, updates, rejected, gaps;
    public Lineage firstLineage, lastLineage;
    /** {@code window} mode: records ahead of the next seq, waiting for the ones before them. */
    public TreeMap<Long, Record> pending = new TreeMap<>();
    /** {@code once} mode: every seq applied so far. */
    public SeqRanges seen = new SeqRanges();

    public SessionState(String sessionId, String sensorId) {
      this.sessionId = sessionId;
      this.sensorId = sensorId;
    }

    /** A record of the session stamped {@code kafkaTimeMs} by Kafka moves its clock (0: none). */
    public void heardAt(long kafkaTimeMs) {
      if (kafkaTimeMs > 0) lastTime = lastTime == null ? kafkaTimeMs : Math.max(lastTime, kafkaTimeMs);
    }

    public long tableRows() {
      return rowsAtEnd == null ? rowIds.size() : rowsAtEnd;
    }

    /** Small enough for a trace row: no table, no buffers. */
    public Map<String, Object> summary() {
      Map<String, Object> found = new LinkedHashMap<>();
      found.put("status", status.toString());
      found.put("last_seq", lastSeq);
      found.put("rows", (long) rowIds.size());
      found.put("records", records);
      found.put("rejected", rejected);
      return found;
    }
  }

  /**
   * Sequence numbers as sorted, disjoint inclusive ranges: what a {@code once} session
   * applied, a handful of ranges where a set would hold every seq.
   */
  public static final class SeqRanges implements Serializable {
    /** Fixed: a session held in a checkpoint stays readable by code that adds a method. */
    private static final long serialVersionUID = 1L;

    /** Each range's low to its high. */
    public final TreeMap<Long, Long> ranges = new TreeMap<>();

    public boolean contains(long seq) {
      Map.Entry<Long, Long> below = ranges.floorEntry(seq);
      return below != null && below.getValue() >= seq;
    }

    public void add(long seq) {
      if (contains(seq)) return;
      Map.Entry<Long, Long> before = ranges.floorEntry(seq);
      boolean afterPrevious = before != null && before.getValue() == seq - 1;
      Long next = ranges.get(seq + 1);
      if (afterPrevious && next != null) {
        ranges.remove(seq + 1);
        ranges.put(before.getKey(), next);
      } else if (afterPrevious) {
        ranges.put(before.getKey(), seq);
      } else if (next != null) {
        ranges.remove(seq + 1);
        ranges.put(seq, next);
      } else {
        ranges.put(seq, seq);
      }
    }
  }

  /**
   * A session's life in the data's own time: Kafka timestamps, never the pipeline's. A
   * session silent for the timeout has expired; what is left of an ended one is a tombstone
   * kept as long again, so that a straggler is rejected as after the end.
   */
  public record Clock(long timeoutMs) implements Serializable {
    /** When the session expires, or its tombstone is evicted. */
    public long deadline(SessionState state) {
      long lives = state.status == Status.EXPIRED ? 2 : 1;
      return state.lastTime + lives * timeoutMs;
    }

    /** Move the session to {@code now} (ms); false when nothing of it is left to hold. */
    public boolean advance(SessionMachine machine, SessionState state, long now, Output out) {
      if (state.lastTime == null) return true;
      if ((state.status == Status.OPEN || state.status == Status.BROKEN)
          && deadline(state) < now) {
        machine.expire(state, out);
      }
      return !((state.status == Status.CLOSED || state.status == Status.EXPIRED)
          && deadline(state) < now);
    }
  }

  public final Mode mode;
  public final Policy policy;
  public final int window;
  public final boolean trace;
  /** silver.bounds.rows_per_session: past it, a record that would add rows is rejected. */
  public final long maxRows;

  public SessionMachine(Mode mode, Policy policy, int window, boolean trace, long maxRows) {
    this.mode = mode;
    this.policy = policy;
    this.window = window;
    this.trace = trace;
    this.maxRows = maxRows;
  }

  /** Apply records (in Kafka order) to the state, in place; what happened. */
  public Output process(SessionState state, List<Record> records) {
    Output out = new Output();
    for (Record record : records) {
      Map<String, Object> before = trace ? state.summary() : Map.of();
      String action;
      try {
        action = one(state, record, out);
      } catch (IntegrityError error) {
        throw error;
      } catch (RuntimeException error) {
        // A bug met by one record must not stop every session: the record is rejected,
        // naming the error, and its session follows its policy.
        String detail = truncate(error.getClass().getSimpleName() + ": " + error.getMessage());
        action = reject(state, record, out, INTERNAL, detail, null, true);
      }
      if (trace) {
        out.transitions.add(
            new Transition(state.sessionId, state.sensorId, action, before, state.summary(),
                record.seq, record.lineage));
      }
    }
    return out;
  }

  /**
   * No record for longer than the timeout: the session is over, a tombstone is left. Records
   * still waiting for the ones before them are rejected into {@code out}: never lost.
   */
  public void expire(SessionState state, Output out) {
    rejectWaiting(state, out, GAP, "when the session expired");
    state.rowsAtEnd = state.tableRows();
    state.status = Status.EXPIRED;
    forgetTable(state);
  }

  private static void forgetTable(SessionState state) {
    state.rowIds = new HashSet<>();
    state.pending = new TreeMap<>();
    state.seen = new SeqRanges();
  }

  private static long expected(SessionState state) {
    return state.lastSeq == null ? 0 : state.lastSeq + 1;
  }

  private void rejectWaiting(SessionState state, Output out, String reason, String when) {
    long expected = expected(state);
    String detail = "waiting for seq " + expected + " " + when;
    while (!state.pending.isEmpty()) {
      Record waiting = state.pending.pollFirstEntry().getValue();
      reject(state, waiting, out, reason, detail, expected, false);
    }
  }

  private String one(SessionState state, Record record, Output out) {
    state.records++;
    if (state.sensorId == null) state.sensorId = record.sensorId;
    if (state.firstLineage == null) state.firstLineage = record.lineage;
    state.lastLineage = record.lineage;
    if (record.eventTime != null) {
      if (state.firstEventTime == null) state.firstEventTime = record.eventTime;
      state.lastEventTime = record.eventTime;
    }
    long expected = expected(state);

    if (state.status == Status.CLOSED || state.status == Status.EXPIRED) {
      return reject(state, record, out, AFTER_END, "session already " + state.status, expected,
          true);
    }
    if (record.problem != null) {
      String detail = record.detail == null ? "" : record.detail;
      return reject(state, record, out, record.problem, detail, expected, true);
    }
    long seq = record.seq;
    if (state.status == Status.BROKEN) {
      if ("snapshot".equals(record.kind)) {
        state.status = Status.OPEN;
        state.brokenAtSeq = null;
        return apply(state, record, out, "resync");
      }
      return reject(state, record, out, QUARANTINED,
          "session broken at seq " + state.brokenAtSeq + "; waiting for a snapshot", null, false);
    }
    if (mode == Mode.NONE) return apply(state, record, out, "apply");
    if (mode == Mode.ONCE) {
      if (state.seen.contains(seq)) {
        return reject(state, record, out, DUPLICATE, "seq already applied", null, true);
      }
      state.seen.add(seq);
      return apply(state, record, out, "apply");
    }
    if (seq < expected) {
      String reason = state.lastSeq != null && seq == state.lastSeq ? DUPLICATE : OUT_OF_ORDER;
      return reject(state, record, out, reason, "seq " + seq + " after " + state.lastSeq,
          expected, true);
    }
    if (seq == expected) {
      String action = apply(state, record, out, "apply");
      if (mode == Mode.WINDOW) drain(state, out);
      return action;
    }
    // seq > expected: the records in between are missing, or late
    if (mode == Mode.ORDERED) {
      state.gaps++;
      return apply(state, record, out, "apply-after-gap");
    }
    if (mode == Mode.WINDOW) {
      state.pending.put(seq, record);
      if (state.pending.size() > window) giveUpWaiting(state, out);
      return "buffer";
    }
    state.gaps++;
    return reject(state, record, out, GAP, "expected seq " + expected + ", found " + seq,
        expected, true);
  }

  private void drain(SessionState state, Output out) {
    while (state.lastSeq != null && state.pending.containsKey(state.lastSeq + 1)) {
      apply(state, state.pending.remove(state.lastSeq + 1), out, "apply");
    }
  }

  private void giveUpWaiting(SessionState state, Output out) {
    // The bound is exceeded: what is missing is declared lost, and the buffered records
    // are applied from the lowest seq on.
    long expected = expected(state);
    long first = state.pending.firstKey();
    Record waiting = state.pending.get(first);
    state.gaps++;
    String detail =
        "seq " + expected + ".." + (first - 1) + " missing after waiting for " + window + " records";
    out.violations.add(Violation.of(state, waiting, GAP, detail, expected));
    apply(state, state.pending.remove(first), out, "apply");
    drain(state, out);
  }

  private String reject(SessionState state, Record record, Output out, String reason,
      String detail, Long expected, boolean breaks) {
    state.rejected++;
    out.violations.add(Violation.of(state, record, reason, detail, expected));
    boolean lenient = mode != Mode.STRICT || reason.equals(AFTER_END);
    if (!breaks || lenient) return "reject:" + reason;
    if (policy == Policy.FAIL) {
      Lineage at = record.lineage;
      String where = at.topic() + "/" + at.partition() + "@" + at.offset();
      String found = record.seq == null ? "unreadable" : record.seq.toString();
      throw new IntegrityError(
          "integrity violation (" + reason + ") in session " + state.sessionId + " at " + where
              + ": expected seq " + (expected == null ? "None" : expected) + ", found " + found
              + ": " + detail);
    }
    state.status = Status.BROKEN;
    state.brokenAtSeq = expected;
    return "reject:" + reason + ":broken";
  }

  private String apply(SessionState state, Record record, Output out, String action) {
    String[] refused = refusal(state, record);
    if (refused != null) {
      return reject(state, record, out, refused[0], refused[1], record.seq, true);
    }
    if (state.firstSeq == null) state.firstSeq = record.seq;
    state.lastSeq = state.lastSeq == null ? record.seq : Math.max(state.lastSeq, record.seq);
    if ("snapshot".equals(record.kind)) {
      applySnapshot(state, record, out);
    } else if ("update".equals(record.kind)) {
      applyUpdate(state, record, out);
    } else {
      // What is left of a closed session is a tombstone of counters, kept until the
      // timeout so that a straggler is recognised as arriving after the end.
      rejectWaiting(state, out, AFTER_END, "when the session ended at seq " + record.seq);
      state.status = Status.CLOSED;
      state.rowsAtEnd = (long) state.rowIds.size();
      forgetTable(state);
    }
    return action;
  }

  /** Why {@code record}, next in sequence, is rejected rather than applied, if it is. */
  private String[] refusal(SessionState state, Record record) {
    boolean update = "update".equals(record.kind);
    if (update && !state.hasSnapshot) {
      return new String[] {UPDATE_BEFORE_SNAPSHOT, "update before the session's first snapshot"};
    }
    boolean unknownRow = "delete".equals(record.op) && !state.rowIds.contains(record.rowId);
    if (update && unknownRow && mode == Mode.STRICT) {
      return new String[] {UNKNOWN_ROW, "delete of unknown row " + record.rowId};
    }
    if (tooManyRows(state, record)) {
      return new String[] {ROWS_BOUND, String.format(Locale.ROOT,
          "the session's table would pass %,d rows (silver.bounds.rows_per_session)", maxRows)};
    }
    return null;
  }

  private boolean tooManyRows(SessionState state, Record record) {
    if ("snapshot".equals(record.kind)) {
      return (record.rows == null ? 0 : record.rows.size()) > maxRows;
    }
    return "update".equals(record.kind) && "upsert".equals(record.op)
        && !state.rowIds.contains(record.rowId) && state.rowIds.size() >= maxRows;
  }

  /** The session's table becomes the snapshot's rows: those it lacks are deleted. */
  private static void applySnapshot(SessionState state, Record record, Output out) {
    TreeSet<String> gone = new TreeSet<>(CODE_POINTS);
    for (String rowId : state.rowIds) {
      if (!record.rows.containsKey(rowId)) gone.add(rowId);
    }
    for (String rowId : gone) out.changes.add(change(state, record, rowId, "delete", null));
    for (Map.Entry<String, Map<String, Object>> row : record.rows.entrySet()) {
      out.changes.add(change(state, record, row.getKey(), "snapshot", row.getValue()));
    }
    state.rowIds = new HashSet<>(record.rows.keySet());
    state.hasSnapshot = true;
    state.snapshots++;
  }

  /** One row inserted, updated or deleted (a delete of a row it lacks changes nothing). */
  private static void applyUpdate(SessionState state, Record record, Output out) {
    state.updates++;
    if ("delete".equals(record.op)) {
      if (state.rowIds.remove(record.rowId)) {
        out.changes.add(change(state, record, record.rowId, "delete", null));
      }
      return;
    }
    String op = state.rowIds.contains(record.rowId) ? "update" : "insert";
    out.changes.add(change(state, record, record.rowId, op, record.values));
    state.rowIds.add(record.rowId);
  }

  private static RowChange change(SessionState state, Record record, String rowId, String op,
      Map<String, Object> values) {
    return new RowChange(state.sessionId, state.sensorId, rowId, op, values, record.seq,
        record.eventTime, record.lineage);
  }

  private static String truncate(String text) {
    return text.length() <= 500 ? text : text.substring(0, 500);
  }
}
