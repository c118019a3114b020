package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.protobuf.ByteString;
import dev.taskbroker.v1.Fanout;
import dev.taskbroker.v1.TaskSpec;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.TraceFlags;
import io.opentelemetry.api.trace.TraceState;
import io.opentelemetry.context.Scope;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@link Outbox#enqueueMySql} against a real MariaDB or MySQL at $TASKBROKER_TEST_MYSQL_URL
 * (mysql://USER:PASS@HOST:PORT/DB, as scripts/mysql.sh prints; skipped without one unless
 * TASKBROKER_REQUIRE_MYSQL is set), through MariaDB Connector/J, each test in a database of its
 * own with the shipped schema.
 */
class OutboxMySqlTest {
  private static final Path SCHEMA = Path.of("..", "..", "migrations", "outbox", "mysql", "0001_outbox.sql");

  private String admin;
  private String name;
  private Connection conn;

  private record Row(long id, String key, TaskSpec spec) {}

  private static String jdbc(String url, String database) {
    URI u = URI.create(url);
    String[] user = u.getRawUserInfo().split(":", 2);
    int port = u.getPort() < 0 ? 3306 : u.getPort();
    return "jdbc:mariadb://" + u.getHost() + ":" + port + "/" + database + "?user=" + user[0]
        + (user.length > 1 ? "&password=" + user[1] : "");
  }

  @BeforeEach
  void freshDatabase() throws Exception {
    admin = System.getenv("TASKBROKER_TEST_MYSQL_URL");
    if (admin == null || admin.isEmpty()) {
      if (System.getenv("TASKBROKER_REQUIRE_MYSQL") != null) {
        fail("TASKBROKER_TEST_MYSQL_URL is not set but MySQL tests are required");
      }
      Assumptions.abort("TASKBROKER_TEST_MYSQL_URL is not set");
    }
    name = "tb_java_outbox_" + ProcessHandle.current().pid() + "_"
        + ThreadLocalRandom.current().nextLong(1L << 40);
    try (Connection c = DriverManager.getConnection(jdbc(admin, ""));
        Statement st = c.createStatement()) {
      st.execute("CREATE DATABASE " + name);
    }
    conn = DriverManager.getConnection(jdbc(admin, name));
    try (Statement st = conn.createStatement()) {
      st.execute(Files.readString(SCHEMA, StandardCharsets.UTF_8));
      st.execute("CREATE TABLE orders (id bigint PRIMARY KEY, total bigint NOT NULL) ENGINE = InnoDB");
    }
  }

  @AfterEach
  void dropDatabase() throws Exception {
    if (conn != null) {
      conn.close();
    }
    if (name != null) {
      try (Connection c = DriverManager.getConnection(jdbc(admin, ""));
          Statement st = c.createStatement()) {
        st.execute("DROP DATABASE IF EXISTS " + name);
      }
    }
  }

  private List<Row> rows() throws Exception {
    List<Row> out = new ArrayList<>();
    try (Connection c = DriverManager.getConnection(jdbc(admin, name));
        Statement st = c.createStatement();
        ResultSet rs = st.executeQuery("SELECT id, idempotency_key, spec FROM taskbroker_outbox ORDER BY id")) {
      while (rs.next()) {
        out.add(new Row(rs.getLong(1), rs.getString(2), TaskSpec.parseFrom(rs.getBytes(3))));
      }
    }
    return out;
  }

  private static TaskSpec spec(String queue, String payload) {
    return TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFromUtf8(payload)).build();
  }

  private void order(long id) throws SQLException {
    try (var st = conn.prepareStatement("INSERT INTO orders VALUES (?, 100)")) {
      st.setLong(1, id);
      st.executeUpdate();
    }
  }

  @Test
  void aCommittedTransactionLeavesItsRowsAndARolledBackOneNone() throws Exception {
    conn.setAutoCommit(false);
    order(1);
    Outbox.Enqueued keyed =
        Outbox.enqueueMySql(conn, spec("emails", "order 1").toBuilder().setKey("order-1").setPriority(3).build());
    Outbox.Enqueued unkeyed = Outbox.enqueueMySql(conn, spec("emails", "order 1 again"));
    conn.commit();
    order(2);
    Outbox.Enqueued dropped = Outbox.enqueueMySql(conn, spec("emails", "order 2"));
    conn.rollback();

    assertEquals("order-1", keyed.key());
    assertTrue(unkeyed.key().startsWith(Outbox.KEY_PREFIX), unkeyed.key());
    assertEquals(Outbox.KEY_PREFIX.length() + 36, unkeyed.key().length());
    assertTrue(!unkeyed.key().equals(dropped.key()) && keyed.id() < unkeyed.id());
    List<Row> got = rows();
    assertEquals(List.of(keyed.id(), unkeyed.id()), got.stream().map(Row::id).toList());
    assertEquals(List.of(keyed.key(), unkeyed.key()), got.stream().map(Row::key).toList());
    TaskSpec first = got.get(0).spec();
    assertEquals("emails", first.getQueue());
    assertEquals("order 1", first.getPayload().toStringUtf8());
    assertEquals(3, first.getPriority());
    assertEquals("order-1", first.getKey());
    assertEquals("", got.get(1).spec().getKey());
    assertEquals("order 1 again", got.get(1).spec().getPayload().toStringUtf8());
    try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM orders")) {
      rs.next();
      assertEquals(1, rs.getInt(1));
    }
  }

  @Test
  void aSpecSubmitWouldRefuseIsRefusedAndNothingIsWritten() throws Exception {
    Map<TaskSpec, String> refused =
        Map.of(
            TaskSpec.getDefaultInstance(), "queue: is required",
            spec("has space", ""), "queue: may only contain A-Z a-z 0-9 . _ : -",
            spec("q".repeat(129), ""), "queue: is longer than 128 characters",
            spec("q", "").toBuilder().setKey("k".repeat(513)).build(), "key: is longer than 512 characters",
            spec("q", "").toBuilder().setKey("a\nb").build(), "key: must not contain control characters",
            spec("q", "").toBuilder().addDependsOnIndex(0).build(),
                "depends_on_index: cannot be used through the outbox (rows of many transactions share "
                    + "one Submit); name dependencies by task id in depends_on",
            spec("q", "").toBuilder().setFanout(Fanout.newBuilder().setCopies(2)).build(),
                "fanout.copies: cannot have more than one copy through the outbox (every row is "
                    + "submitted under an idempotency key, which Submit refuses with fan-out)");
    for (var c : refused.entrySet()) {
      var e = assertThrows(Outbox.InvalidSpecException.class, () -> Outbox.enqueueMySql(conn, c.getKey()));
      assertEquals(c.getValue(), e.getMessage());
      assertEquals(c.getValue().substring(0, c.getValue().indexOf(':')), e.field());
    }
    assertEquals(List.of(), rows());
  }

  @Test
  void theCallersTraceGoesIntoTheSpec() throws Exception {
    SpanContext sc =
        SpanContext.create(
            "0102030405060708090a0b0c0d0e0f10", "0102030405060708", TraceFlags.getSampled(), TraceState.getDefault());
    Scope scope = Span.wrap(sc).makeCurrent();
    try {
      Outbox.enqueueMySql(conn, spec("traced", ""));
    } finally {
      scope.close();
    }
    assertEquals(
        "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01",
        rows().get(0).spec().getMetadataOrThrow(Tracing.TRACEPARENT));
  }
}
