package lakehouse.bench;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import scala.Tuple2;
import scala.Tuple4;

/**
 * {@code benchmarks/silver.py}'s stateful limit without Python: the same keying by session
 * and the same trivial work (count the records, keep the count in state), in Spark's JVM
 * state API ({@code flatMapGroupsWithState}). Measures what a session machine written for
 * the JVM could reach at most, against {@code applyInPandasWithState}'s limit.
 */
public final class SessionCount {
  private SessionCount() {}

  /** One row per session and batch: (session_id, records seen so far). */
  public static Dataset<Row> bySession(Dataset<Row> parsed) {
    FlatMapGroupsWithStateFunction<String, Row, Long, Tuple2<String, Long>> count =
        (session, records, state) -> {
          long seen = state.exists() ? state.get() : 0L;
          while (records.hasNext()) {
            records.next();
            seen++;
          }
          state.update(seen);
          Iterator<Tuple2<String, Long>> out =
              Collections.singletonList(new Tuple2<>(session, seen)).iterator();
          return out;
        };
    return parsed
        .groupByKey((MapFunction<Row, String>) r -> r.getAs("session_id"), Encoders.STRING())
        .flatMapGroupsWithState(
            count,
            OutputMode.Append(),
            Encoders.LONG(),
            Encoders.tuple(Encoders.STRING(), Encoders.LONG()),
            GroupStateTimeout.NoTimeout())
        .toDF("session_id", "rows");
  }

  /**
   * The seed design's shape, as a peer of silver: keyed as silver keys (by sensor), a count
   * per key in state, and one row out per record in: (sensor_id, session_id, seq, records
   * of the sensor so far), for the caller to append to Delta.
   */
  public static Dataset<Row> perRecord(Dataset<Row> parsed) {
    FlatMapGroupsWithStateFunction<String, Row, Long, Tuple4<String, String, Long, Long>> pass =
        (sensor, records, state) -> {
          long seen = state.exists() ? state.get() : 0L;
          List<Tuple4<String, String, Long, Long>> out = new ArrayList<>();
          while (records.hasNext()) {
            Row record = records.next();
            Number seq = record.getAs("seq");
            seen++;
            out.add(
                new Tuple4<>(
                    sensor,
                    record.<String>getAs("session_id"),
                    seq == null ? null : seq.longValue(),
                    seen));
          }
          state.update(seen);
          return out.iterator();
        };
    return parsed
        .groupByKey((MapFunction<Row, String>) r -> r.getAs("sensor_id"), Encoders.STRING())
        .flatMapGroupsWithState(
            pass,
            OutputMode.Append(),
            Encoders.LONG(),
            Encoders.tuple(Encoders.STRING(), Encoders.STRING(), Encoders.LONG(), Encoders.LONG()),
            GroupStateTimeout.NoTimeout())
        .toDF("sensor_id", "session_id", "seq", "records");
  }
}
