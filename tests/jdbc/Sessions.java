import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

import org.apache.hadoop.hive.common.auth.HiveAuthUtils;
import org.apache.hive.service.auth.PlainSaslHelper;
import org.apache.hive.service.rpc.thrift.TCLIService;
import org.apache.hive.service.rpc.thrift.TCloseSessionReq;
import org.apache.hive.service.rpc.thrift.TOpenSessionReq;
import org.apache.hive.service.rpc.thrift.TOpenSessionResp;
import org.apache.hive.service.rpc.thrift.TStatusCode;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.transport.TTransport;

/**
 * Opens one session per case against a SQL server, as a client would, and prints one line per
 * case: {@code N<TAB>OK<TAB>what it answered} or {@code N<TAB>ERR<TAB>the error's message}.
 *
 * <p>{@code java -cp <pyspark>/jars/* Sessions.java URL HOST PORT TRUSTSTORE TRUSTSTORE_PASSWORD
 * USER PASSWORD_FILE CASES}, where each line of CASES is {@code kind<TAB>argument<TAB>statement}:
 * <ul>
 *   <li>{@code url}: Hive's JDBC driver with the argument appended to URL ({@code ?k=v},
 *       {@code #k=v}, {@code ;k=v}) or, when it starts with {@code /}, as its database;
 *   <li>{@code password}: the driver with the argument as the password;
 *   <li>{@code raw}: a Thrift OpenSession whose configuration is the argument's
 *       {@code key=value} entries, separated by {@code ;;}, as no JDBC driver sends them;
 *   <li>{@code meta}: a DatabaseMetaData call ({@code tables}, {@code columns}, {@code schemas},
 *       {@code functions}, {@code keys}) on the argument's database pattern: the databases
 *       of its rows.
 * </ul>
 */
public final class Sessions {
  public static void main(String[] args) throws Exception {
    String url = args[0];
    String password = Files.readString(Path.of(args[6])).strip();
    List<String> cases = Files.readAllLines(Path.of(args[7]));
    for (int n = 0; n < cases.size(); n++) {
      String[] c = (cases.get(n) + "\t\t").split("\t", -1);
      String said;
      try {
        switch (c[0]) {
          case "url":
            said = statement(c[1].startsWith("/") ? url.replace("/gold;", c[1] + ";") : url + c[1],
                args[5], password, c[2]);
            break;
          case "password":
            said = statement(url, args[5], c[1], c[2]);
            break;
          case "raw":
            said = raw(args[1], Integer.parseInt(args[2]), args[3], args[4], args[5], password, c[1]);
            break;
          default:
            said = meta(url, args[5], password, c[1], c[2]);
        }
        said = "OK\t" + said;
      } catch (Exception error) {
        said = "ERR\t" + error.getMessage();
      }
      System.out.println(n + "\t" + said.replace('\n', ' ').replace('\r', ' '));
    }
  }

  private static String statement(String url, String user, String password, String sql)
      throws Exception {
    try (Connection connection = DriverManager.getConnection(url, user, password);
        Statement statement = connection.createStatement()) {
      if (!statement.execute(sql)) {
        return "";
      }
      List<String> rows = new ArrayList<>();
      ResultSet result = statement.getResultSet();
      ResultSetMetaData columns = result.getMetaData();
      while (result.next()) {
        List<String> cells = new ArrayList<>();
        for (int i = 1; i <= columns.getColumnCount(); i++) {
          cells.add(result.getString(i));
        }
        rows.add(String.join(",", cells));
      }
      return String.join(" | ", rows);
    }
  }

  private static String meta(String url, String user, String password, String call,
      String database) throws Exception {
    try (Connection connection = DriverManager.getConnection(url, user, password)) {
      DatabaseMetaData meta = connection.getMetaData();
      ResultSet rows;
      switch (call) {
        case "tables":
          rows = meta.getTables(null, database, "%", null);
          break;
        case "columns":
          rows = meta.getColumns(null, database, "%", "%");
          break;
        case "schemas":
          rows = meta.getSchemas(null, database);
          break;
        case "functions":
          rows = meta.getFunctions(null, database, "%");
          break;
        default:
          rows = meta.getPrimaryKeys(null, database, "outside");
      }
      TreeSet<String> databases = new TreeSet<>();
      int count = 0;
      while (rows.next()) {
        databases.add(String.valueOf(rows.getString(call.equals("schemas") ? 1 : 2)));
        count++;
      }
      return count + " rows of " + String.join(",", databases);
    }
  }

  private static String raw(String host, int port, String truststore, String trustPassword,
      String user, String password, String entries) throws Exception {
    Map<String, String> configuration = new HashMap<>();
    for (String entry : entries.split(";;")) {
      int equals = entry.indexOf('=');
      configuration.put(entry.substring(0, equals), entry.substring(equals + 1));
    }
    TTransport socket = HiveAuthUtils.getSSLSocket(host, port, 30_000, truststore, trustPassword);
    TTransport transport = PlainSaslHelper.getPlainTransport(user, password, socket);
    transport.open();
    try {
      TCLIService.Client client = new TCLIService.Client(new TBinaryProtocol(transport));
      TOpenSessionReq request = new TOpenSessionReq();
      request.setUsername(user);
      request.setPassword(password);
      request.setConfiguration(configuration);
      TOpenSessionResp response = client.OpenSession(request);
      if (response.getStatus().getStatusCode() != TStatusCode.SUCCESS_STATUS) {
        throw new IllegalStateException(response.getStatus().getErrorMessage());
      }
      client.CloseSession(new TCloseSessionReq(response.getSessionHandle()));
      return "opened";
    } finally {
      transport.close();
    }
  }
}
