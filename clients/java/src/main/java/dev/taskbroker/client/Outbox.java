package dev.taskbroker.client;

import dev.taskbroker.v1.TaskSpec;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.UUID;

/**
 * Transactional enqueue: writes a task into the producer's own MySQL 8.0.13+ or MariaDB 10.6+
 * database, in the producer's transaction, as a row of {@code taskbroker_outbox}
 * ({@code migrations/outbox/mysql/}). {@code taskbroker relay --source mysql://...} ships
 * committed rows to the broker; a rolled-back transaction leaves no row, so no task. See
 * docs/outbox.md.
 *
 * <pre>{@code
 * conn.setAutoCommit(false);
 * try (var st = conn.prepareStatement("INSERT INTO orders (id, total) VALUES (?, ?)")) {
 *   st.setLong(1, 42); st.setLong(2, 1999); st.executeUpdate();
 * }
 * TaskSpec spec = tb.spec("emails", email).setKey("order-42").build();
 * Outbox.Enqueued row = Outbox.enqueueMySql(conn, spec);
 * conn.commit(); // or conn.rollback(): both or neither
 * }</pre>
 *
 * <p>Any JDBC driver for MySQL or MariaDB (MariaDB Connector/J, MySQL Connector/J); with Spring,
 * {@code DataSourceUtils.getConnection(dataSource)} inside a {@code @Transactional} method is the
 * transaction's connection.
 */
public final class Outbox {
  /** The prefix of the idempotency key of a row whose spec has no key of its own. */
  public static final String KEY_PREFIX = "outbox:";

  private static final int MAX_KEY_BYTES = 512;
  private static final String INSERT_MYSQL =
      "INSERT INTO taskbroker_outbox (idempotency_key, spec) VALUES (?, ?)";

  private Outbox() {}

  /**
   * One row written to the outbox.
   *
   * @param id the row's id (its place in the shipping order)
   * @param key the idempotency key the task will have at the broker: the spec's own key, or
   *     {@code outbox:} and a random UUID ({@code taskbroker list --key KEY} finds the task)
   */
  public record Enqueued(long id, String key) {}

  /** A spec Submit would refuse whatever the broker's settings; nothing was written. */
  public static final class InvalidSpecException extends TaskbrokerException {
    private static final long serialVersionUID = 1L;
    private final String field;

    InvalidSpecException(String field, String message) {
      super(field + ": " + message);
      this.field = field;
    }

    /** The spec's field at fault ({@code queue}, {@code key}, ...). */
    public String field() {
      return field;
    }
  }

  /**
   * Writes {@code spec} into the outbox through {@code conn}, in its transaction (under
   * autocommit the row commits by itself). The current trace context's {@code traceparent} goes
   * into the spec's metadata (unless it has one), so the task's trace starts at the producer.
   * MySQL has no RETURNING: a spec without a key gets {@code outbox:} and a random UUID here, and
   * the id is the statement's generated key.
   *
   * @throws InvalidSpecException naming the field, when Submit would refuse the spec (see {@link
   *     #check}); nothing is written
   * @throws SQLException from the driver
   */
  public static Enqueued enqueueMySql(Connection conn, TaskSpec spec) throws SQLException {
    check(spec);
    TaskSpec withTrace = Tracing.inject(spec.toBuilder()).build();
    String key = spec.getKey().isEmpty() ? KEY_PREFIX + UUID.randomUUID() : spec.getKey();
    try (PreparedStatement st =
        conn.prepareStatement(INSERT_MYSQL, Statement.RETURN_GENERATED_KEYS)) {
      st.setString(1, key);
      st.setBytes(2, withTrace.toByteArray());
      st.executeUpdate();
      try (ResultSet ids = st.getGeneratedKeys()) {
        if (!ids.next()) {
          throw new SQLException("INSERT INTO taskbroker_outbox returned no id");
        }
        return new Enqueued(ids.getLong(1), key);
      }
    }
  }

  /**
   * Throws {@link InvalidSpecException} naming the field when Submit would refuse {@code spec}
   * whatever the broker's settings (queue name, key), or when the outbox cannot ship it.
   */
  public static void check(TaskSpec spec) {
    if (spec == null) {
      throw new IllegalArgumentException("spec is null");
    }
    String q = spec.getQueue();
    if (q.isEmpty()) {
      throw new InvalidSpecException("queue", "is required");
    }
    if (q.length() > 128) {
      throw new InvalidSpecException("queue", "is longer than 128 characters");
    }
    if (!q.chars().allMatch(Outbox::queueChar)) {
      throw new InvalidSpecException("queue", "may only contain A-Z a-z 0-9 . _ : -");
    }
    String k = spec.getKey();
    if (k.getBytes(StandardCharsets.UTF_8).length > MAX_KEY_BYTES) {
      throw new InvalidSpecException("key", "is longer than 512 characters");
    }
    if (k.codePoints().anyMatch(c -> c < 0x20 || (c >= 0x7f && c <= 0x9f))) {
      throw new InvalidSpecException("key", "must not contain control characters");
    }
    // The relay submits rows of many transactions together, each under an idempotency key
    // (docs/outbox.md): an index into the request, or more than one fan-out copy, cannot be
    // shipped.
    if (spec.getDependsOnIndexCount() > 0) {
      throw new InvalidSpecException(
          "depends_on_index",
          "cannot be used through the outbox (rows of many transactions share one Submit); "
              + "name dependencies by task id in depends_on");
    }
    if (spec.hasFanout() && spec.getFanout().getCopies() > 1) {
      throw new InvalidSpecException(
          "fanout.copies",
          "cannot have more than one copy through the outbox (every row is submitted under an "
              + "idempotency key, which Submit refuses with fan-out)");
    }
  }

  private static boolean queueChar(int c) {
    return (c >= 'a' && c <= 'z')
        || (c >= 'A' && c <= 'Z')
        || (c >= '0' && c <= '9')
        || c == '.'
        || c == '_'
        || c == ':'
        || c == '-';
  }
}
