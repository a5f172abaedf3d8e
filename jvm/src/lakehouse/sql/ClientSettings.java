package lakehouse.sql;

import java.time.DateTimeException;
import java.time.ZoneId;
import java.util.Arrays;
import java.util.Collections;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Predicate;
import java.util.regex.Pattern;

/**
 * The settings a client of downstream SQL may give, each judged by its key and its value: with
 * {@code SET key=value}, and in the session a JDBC client opens (its URL's {@code ?k=v} and
 * {@code #k=v}). Everything else a client sends is refused, so that no client reaches the
 * server's own settings, environment or system properties.
 */
final class ClientSettings {

  /** One statement's share of the server: shuffle partitions, range slices, repartitions. */
  static final int MAX_PARTITIONS = 1000;

  /** Rows a client may fetch at once (Hive's JDBC driver asks 1,000 unless told). */
  static final int MAX_FETCH_SIZE = 10_000;

  static final String FETCH_SIZE = "hive.server2.thrift.resultset.default.fetch.size";

  private static final Predicate<String> BOOLEAN =
      v -> v.equalsIgnoreCase("true") || v.equalsIgnoreCase("false");

  private static final Pattern ZONE = Pattern.compile("[A-Za-z0-9_+\\-/:]{1,64}");

  /** How a query computes or shows its result, with the values each may take. */
  private static final Map<String, Predicate<String>> SETTABLE = new TreeMap<>();

  private static final Map<String, String> ALLOWED = new TreeMap<>();

  static {
    settable("spark.sql.session.timeZone", ClientSettings::zone, "a time zone such as UTC");
    settable("spark.sql.ansi.enabled", BOOLEAN, "true or false");
    settable("spark.sql.shuffle.partitions", v -> count(v, MAX_PARTITIONS),
        "1 to " + MAX_PARTITIONS);
    settable("spark.sql.adaptive.enabled", BOOLEAN, "true or false");
    settable("spark.sql.legacy.timeParserPolicy",
        v -> Arrays.asList("EXCEPTION", "LEGACY", "CORRECTED").contains(upper(v)),
        "EXCEPTION, LEGACY or CORRECTED");
    settable("spark.sql.caseSensitive", BOOLEAN, "true or false");
    settable("spark.sql.timestampType",
        v -> Arrays.asList("TIMESTAMP_LTZ", "TIMESTAMP_NTZ").contains(upper(v)),
        "TIMESTAMP_LTZ or TIMESTAMP_NTZ");
    settable("spark.sql.datetime.java8API.enabled", BOOLEAN, "true or false");
    settable("spark.sql.decimalOperations.allowPrecisionLoss", BOOLEAN, "true or false");
  }

  /** Not the broadcast threshold: a broadcast is built in the server, so raising it lifts a bound. */
  static final Set<String> KEYS = Collections.unmodifiableSet(SETTABLE.keySet());

  private ClientSettings() {}

  private static void settable(String key, Predicate<String> valid, String values) {
    SETTABLE.put(key, valid);
    ALLOWED.put(key, values);
  }

  /** The refusal of {@code SET key=value}, or null if a client may set it so. */
  static String refusal(String key, String value) {
    String trimmed = key.trim();
    if (!SETTABLE.containsKey(trimmed)) {
      return "SET " + trimmed + " is refused: downstream SQL may set only "
          + String.join(", ", KEYS);
    }
    String v = value.trim();
    if (v.contains("${") || !SETTABLE.get(trimmed).test(v)) {
      return trimmed + " may be " + ALLOWED.get(trimmed) + ", not the value given";
    }
    return null;
  }

  /** The fetch size a client may ask for: a count within {@link #MAX_FETCH_SIZE}. */
  static String fetchSizeRefusal(String value) {
    return count(value.trim(), MAX_FETCH_SIZE) ? null
        : FETCH_SIZE + " may be 1 to " + MAX_FETCH_SIZE + ", not the value given";
  }

  private static boolean zone(String value) {
    if (!ZONE.matcher(value).matches()) {
      return false;
    }
    try {
      ZoneId.of(value);
      return true;
    } catch (DateTimeException notAZone) {
      return false;
    }
  }

  private static boolean count(String value, int bound) {
    if (!value.matches("\\d{1,9}")) {
      return false;
    }
    int n = Integer.parseInt(value);
    return n >= 1 && n <= bound;
  }

  private static String upper(String value) {
    return value.toUpperCase(Locale.ROOT);
  }
}
