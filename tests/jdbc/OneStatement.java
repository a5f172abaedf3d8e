import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * Sends one statement whole over JDBC, as a BI tool does (beeline splits its input at `;`):
 * {@code java -cp <pyspark>/jars/* OneStatement.java URL USER PASSWORD_FILE STATEMENT}. Prints
 * the first column of each row; on an error, its message on stderr and exit status 1.
 */
public final class OneStatement {
  public static void main(String[] args) throws Exception {
    String password = Files.readString(Path.of(args[2])).strip();
    try (Connection connection = DriverManager.getConnection(args[0], args[1], password);
        Statement statement = connection.createStatement()) {
      if (statement.execute(args[3])) {
        ResultSet rows = statement.getResultSet();
        while (rows.next()) {
          System.out.println(rows.getString(1));
        }
      }
    } catch (SQLException error) {
      System.err.println("Error: " + error.getMessage());
      System.exit(1);
    }
  }
}
