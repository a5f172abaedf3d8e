package lakehouse.sql;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.List;
import java.util.Set;

import org.apache.hadoop.hive.common.ServerUtils;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hive.service.Service;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.cli.thrift.ThriftBinaryCLIService;
import org.apache.hive.service.cli.thrift.ThriftCLIService;
import org.apache.hive.service.rpc.thrift.TExecuteStatementReq;
import org.apache.hive.service.rpc.thrift.TExecuteStatementResp;
import org.apache.hive.service.rpc.thrift.TGetColumnsReq;
import org.apache.hive.service.rpc.thrift.TGetColumnsResp;
import org.apache.hive.service.rpc.thrift.TGetCrossReferenceReq;
import org.apache.hive.service.rpc.thrift.TGetCrossReferenceResp;
import org.apache.hive.service.rpc.thrift.TGetFunctionsReq;
import org.apache.hive.service.rpc.thrift.TGetFunctionsResp;
import org.apache.hive.service.rpc.thrift.TGetPrimaryKeysReq;
import org.apache.hive.service.rpc.thrift.TGetPrimaryKeysResp;
import org.apache.hive.service.rpc.thrift.TGetSchemasReq;
import org.apache.hive.service.rpc.thrift.TGetSchemasResp;
import org.apache.hive.service.rpc.thrift.TGetTablesReq;
import org.apache.hive.service.rpc.thrift.TGetTablesResp;
import org.apache.hive.service.rpc.thrift.TOpenSessionReq;
import org.apache.hive.service.rpc.thrift.TOpenSessionResp;
import org.apache.hive.service.rpc.thrift.TStatus;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.hive.HiveUtils$;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2$;
import org.apache.thrift.TException;

/**
 * Spark's Thrift JDBC/ODBC server with a door that judges what a client brings before Hive
 * acts on it: the settings a session opens with ({@link SessionDoor}), a statement's settings
 * overlay, and the database every metadata call names (they never pass the SQL parser, so the
 * parser's guard never sees them). The server is Spark's own, started as
 * {@code HiveThriftServer2.startWithSparkSession} starts it, with its binary Thrift service
 * replaced by {@link Door} between init and start (HiveServer2 opens its socket at start).
 */
public final class GuardedThriftServer {

  private GuardedThriftServer() {}

  /** Start the server on this application's session; {@code stop()} the result to stop it. */
  public static HiveThriftServer2 start(SparkSession session) throws ReflectiveOperationException {
    Set<String> lake = ReadOnlyExtension.lake(session);
    SparkContext context = session.sparkContext();
    HiveThriftServer2$.MODULE$.systemExitOnError().set(false);
    HiveConf conf = HiveUtils$.MODULE$
        .newClientForExecution(context.conf(), session.sessionState().newHadoopConf()).conf();
    ServerUtils.cleanUpScratchDir(conf);
    if (HiveConf.getVar(conf, HiveConf.ConfVars.HIVE_SERVER2_TRANSPORT_MODE)
        .equalsIgnoreCase("http")) {
      throw new IllegalArgumentException("the SQL server speaks the binary Thrift protocol only");
    }
    HiveThriftServer2 server = new HiveThriftServer2(session);
    server.init(conf);
    ThriftCLIService spark = (ThriftCLIService) field(server, "thriftCLIService").get(server);
    Door door = new Door((CLIService) field(spark, "cliService").get(spark), lake);
    door.init(conf);
    @SuppressWarnings("unchecked")
    List<Service> services = (List<Service>) field(server, "serviceList").get(server);
    services.set(services.indexOf(spark), door);
    field(server, "thriftCLIService").set(server, door);
    server.start();
    // The listener the session manager reports each session to, and the UI's tab if on.
    Method listener = HiveThriftServer2$.class.getDeclaredMethod(
        "createListenerAndUI", HiveThriftServer2.class, SparkContext.class);
    listener.setAccessible(true);
    listener.invoke(HiveThriftServer2$.MODULE$, server, context);
    return server;
  }

  private static Field field(Object owner, String name) throws NoSuchFieldException {
    for (Class<?> c = owner.getClass(); c != null; c = c.getSuperclass()) {
      try {
        Field field = c.getDeclaredField(name);
        field.setAccessible(true);
        return field;
      } catch (NoSuchFieldException notHere) {
        // an ancestor's
      }
    }
    throw new NoSuchFieldException(name);
  }

  /** The binary Thrift service, judging each request a client could reach past the parser. */
  static final class Door extends ThriftBinaryCLIService {
    private final Set<String> lake;

    Door(CLIService cli, Set<String> lake) {
      super(cli);
      this.lake = lake;
    }

    @Override
    public TOpenSessionResp OpenSession(TOpenSessionReq request) throws TException {
      String refused = SessionDoor.refusal(request.getConfiguration(), lake);
      if (refused == null) {
        return super.OpenSession(request);
      }
      TOpenSessionResp response = new TOpenSessionResp();
      response.setServerProtocolVersion(request.getClient_protocol());
      response.setStatus(refusal(refused));
      return response;
    }

    @Override
    public TExecuteStatementResp ExecuteStatement(TExecuteStatementReq request) throws TException {
      if (request.getConfOverlaySize() == 0) {
        return super.ExecuteStatement(request);
      }
      TExecuteStatementResp response = new TExecuteStatementResp();
      response.setStatus(refusal("a statement may not carry settings of its own; SET those a "
          + "session may change (" + String.join(", ", ClientSettings.KEYS) + ")"));
      return response;
    }

    @Override
    public TGetSchemasResp GetSchemas(TGetSchemasReq request) throws TException {
      String databases = SessionDoor.lakePattern(request.getSchemaName(), lake);
      if (databases == null) {
        TGetSchemasResp response = new TGetSchemasResp();
        response.setStatus(outside(request.getSchemaName()));
        return response;
      }
      request.setSchemaName(databases);
      return super.GetSchemas(request);
    }

    @Override
    public TGetTablesResp GetTables(TGetTablesReq request) throws TException {
      String databases = SessionDoor.lakePattern(request.getSchemaName(), lake);
      if (databases == null) {
        TGetTablesResp response = new TGetTablesResp();
        response.setStatus(outside(request.getSchemaName()));
        return response;
      }
      request.setSchemaName(databases);
      return super.GetTables(request);
    }

    @Override
    public TGetColumnsResp GetColumns(TGetColumnsReq request) throws TException {
      String databases = SessionDoor.lakePattern(request.getSchemaName(), lake);
      if (databases == null) {
        TGetColumnsResp response = new TGetColumnsResp();
        response.setStatus(outside(request.getSchemaName()));
        return response;
      }
      request.setSchemaName(databases);
      return super.GetColumns(request);
    }

    @Override
    public TGetFunctionsResp GetFunctions(TGetFunctionsReq request) throws TException {
      String databases = SessionDoor.lakePattern(request.getSchemaName(), lake);
      if (databases == null) {
        TGetFunctionsResp response = new TGetFunctionsResp();
        response.setStatus(outside(request.getSchemaName()));
        return response;
      }
      request.setSchemaName(databases);
      return super.GetFunctions(request);
    }

    @Override
    public TGetPrimaryKeysResp GetPrimaryKeys(TGetPrimaryKeysReq request) throws TException {
      if (SessionDoor.lakeDatabase(request.getSchemaName(), lake)) {
        return super.GetPrimaryKeys(request);
      }
      TGetPrimaryKeysResp response = new TGetPrimaryKeysResp();
      response.setStatus(outside(request.getSchemaName()));
      return response;
    }

    @Override
    public TGetCrossReferenceResp GetCrossReference(TGetCrossReferenceReq request)
        throws TException {
      if (SessionDoor.lakeDatabase(request.getParentSchemaName(), lake)
          && SessionDoor.lakeDatabase(request.getForeignSchemaName(), lake)) {
        return super.GetCrossReference(request);
      }
      TGetCrossReferenceResp response = new TGetCrossReferenceResp();
      response.setStatus(outside(request.getParentSchemaName() + ", "
          + request.getForeignSchemaName()));
      return response;
    }

    private TStatus outside(String named) {
      return refusal("metadata of " + (named == null ? "every database" : "'" + named + "'")
          + " is refused: it names none of the lake's databases (" + String.join(", ", lake)
          + ")");
    }

    private static TStatus refusal(String refusal) {
      return HiveSQLException.toTStatus(new HiveSQLException("read-only: " + refusal));
    }
  }
}
