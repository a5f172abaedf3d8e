package lakehouse.sql;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Pattern;

/**
 * What a client may carry into the session it opens, and which databases its metadata calls
 * may name: judged before HiveServer2 applies anything, because it applies a session's settings
 * itself (a {@code set:system:} entry with {@code System.setProperty}, others with Hive's
 * variable substitution over the server's environment and settings) before any statement
 * exists for the parser's guard to judge.
 */
final class SessionDoor {

  private static final String USE = "use:database";
  private static final String HIVECONF = "set:hiveconf:";
  private static final String HIVEVAR = "set:hivevar:";

  private SessionDoor() {}

  /**
   * The refusal of a session's configuration, or null. Hive's JDBC driver sends the database of
   * its URL ({@code use:database}), its fetch size, and the URL's {@code ?k=v} and {@code #k=v}
   * as {@code set:hiveconf:k} and {@code set:hivevar:k}; each must be one a client may set, with
   * a value it may take. Nothing else is admitted: not {@code set:system:}, {@code set:metaconf:},
   * {@code set:env:}, a proxy user, or a bare Hive setting.
   */
  static String refusal(Map<String, String> configuration, Set<String> lake) {
    if (configuration == null) {
      return null;
    }
    List<String> refused = new ArrayList<>();
    for (Map.Entry<String, String> entry : new java.util.TreeMap<>(configuration).entrySet()) {
      String why = entryRefusal(entry.getKey(), entry.getValue() == null ? "" : entry.getValue(),
          lake);
      if (why != null) {
        refused.add(why);
      }
    }
    if (refused.isEmpty()) {
      return null;
    }
    return "the session was refused, with nothing of it applied: " + String.join("; ", refused);
  }

  private static String entryRefusal(String key, String value, Set<String> lake) {
    if (key.equals(USE)) {
      return lake.contains(value.trim().toLowerCase(Locale.ROOT)) ? null
          : "connect to one of the lake's databases (" + String.join(", ", lake)
              + "), e.g. jdbc:hive2://host:port/gold";
    }
    String name = key.startsWith(HIVECONF) ? key.substring(HIVECONF.length())
        : key.startsWith(HIVEVAR) ? key.substring(HIVEVAR.length()) : null;
    if (name == null) {
      return key + " is not a setting a client may carry (only the URL's database, its fetch "
          + "size and " + String.join(", ", ClientSettings.KEYS) + ")";
    }
    if (name.equals(ClientSettings.FETCH_SIZE) && key.startsWith(HIVECONF)) {
      return ClientSettings.fetchSizeRefusal(value);
    }
    return ClientSettings.refusal(name, value);
  }

  /**
   * The lake's databases a JDBC metadata pattern names ({@code %} or {@code *} any characters,
   * {@code _} one,
   * {@code \} escaping either; null or empty: all), as one Spark pattern of alternatives
   * ({@code bronze|gold}); null when it names none of them.
   */
  static String lakePattern(String jdbcPattern, Set<String> lake) {
    Pattern pattern = Pattern.compile(regex(jdbcPattern), Pattern.CASE_INSENSITIVE);
    Set<String> named = new TreeSet<>();
    for (String database : lake) {
      if (pattern.matcher(database).matches()) {
        named.add(database);
      }
    }
    return named.isEmpty() ? null : String.join("|", named);
  }

  /** Whether a metadata call's one database (primary and foreign keys) is the lake's. */
  static boolean lakeDatabase(String name, Set<String> lake) {
    return name != null && lake.contains(name.toLowerCase(Locale.ROOT));
  }

  private static String regex(String jdbcPattern) {
    if (jdbcPattern == null || jdbcPattern.isEmpty()) {
      return ".*";
    }
    StringBuilder regex = new StringBuilder();
    for (int i = 0; i < jdbcPattern.length(); i++) {
      char c = jdbcPattern.charAt(i);
      if (c == '\\' && i + 1 < jdbcPattern.length()) {
        regex.append(Pattern.quote(String.valueOf(jdbcPattern.charAt(++i))));
      } else if (c == '%' || c == '*') { // '*': Hive's own wildcard, which its patterns keep
        regex.append(".*");
      } else if (c == '_') {
        regex.append('.');
      } else {
        regex.append(Pattern.quote(String.valueOf(c)));
      }
    }
    return regex.toString();
  }
}
