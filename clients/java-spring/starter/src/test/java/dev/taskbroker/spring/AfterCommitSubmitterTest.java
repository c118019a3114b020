package dev.taskbroker.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.ListTasksRequest;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.Task;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.jdbc.DataSourceAutoConfiguration;
import org.springframework.boot.autoconfigure.jdbc.DataSourceTransactionManagerAutoConfiguration;
import org.springframework.boot.autoconfigure.jdbc.JdbcTemplateAutoConfiguration;
import org.springframework.boot.autoconfigure.transaction.TransactionAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.support.TransactionTemplate;

/**
 * {@link AfterCommitSubmitter} with a real transaction manager (DataSourceTransactionManager
 * over an in-memory H2) against the live broker (TASKBROKER_ADDR, started by test.sh): a
 * committed transaction's task exists on the broker, and not before the commit; a rolled-back
 * one's does not, nor its row; without a transaction the task is submitted at once.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class AfterCommitSubmitterTest {
  private static Taskbroker tb;
  private static ApplicationContextRunner runner;
  private final String queue = "after-commit-" + UUID.randomUUID().toString().substring(0, 8);

  @BeforeAll
  static void connect() {
    String addr = System.getenv("TASKBROKER_ADDR");
    assertThat(addr).as("TASKBROKER_ADDR is not set: run clients/java-spring/test.sh, which starts a broker").isNotNull();
    tb = Taskbroker.connect(addr);
    runner =
        new ApplicationContextRunner()
            .withConfiguration(
                AutoConfigurations.of(
                    TaskbrokerAutoConfiguration.class,
                    DataSourceAutoConfiguration.class,
                    DataSourceTransactionManagerAutoConfiguration.class,
                    JdbcTemplateAutoConfiguration.class,
                    TransactionAutoConfiguration.class))
            .withPropertyValues("taskbroker.address=" + addr, "taskbroker.workers-enabled=false");
  }

  @AfterAll
  static void disconnect() {
    tb.close();
  }

  /** The broker's tasks of this test's queue with {@code key}. */
  private List<Task> tasks(String key) {
    return tb.admin()
        .listTasks(ListTasksRequest.newBuilder().setQueue(queue).setKey(key).build())
        .getTasksList();
  }

  private static void createTable(JdbcTemplate jdbc) {
    jdbc.execute("CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)");
  }

  @Test
  void committedTransactionSubmitsTheTaskAfterTheCommit() {
    runner.run(
        ctx -> {
          assertThat(ctx).hasNotFailed().hasSingleBean(AfterCommitSubmitter.class);
          AfterCommitSubmitter submitter = ctx.getBean(AfterCommitSubmitter.class);
          JdbcTemplate jdbc = ctx.getBean(JdbcTemplate.class);
          createTable(jdbc);
          String key = "order-" + UUID.randomUUID();

          AfterCommitSubmitter.Submission s =
              ctx.getBean(TransactionTemplate.class)
                  .execute(
                      status -> {
                        jdbc.update("INSERT INTO orders (id) VALUES (?)", key);
                        AfterCommitSubmitter.Submission inTx =
                            submitter.submitAfterCommit(tb.spec(queue, "hello").setKey(key).build());
                        assertThat(inTx.mode()).isEqualTo(AfterCommitSubmitter.Mode.DEFERRED);
                        assertThat(inTx.deferred()).isTrue();
                        assertThat(inTx.result()).isNotDone();
                        assertThat(tasks(key)).as("no task before the commit").isEmpty();
                        return inTx;
                      });

          assertThat(s.result()).as("the Submit ran after the commit").isDone();
          SubmitResult r = s.result().join();
          assertThat(tasks(key)).extracting(Task::getId).containsExactly(r.getTaskId());
          assertThat(jdbc.queryForObject("SELECT COUNT(*) FROM orders", Integer.class)).isEqualTo(1);
        });
  }

  @Test
  void rolledBackTransactionSubmitsNothing() {
    runner.run(
        ctx -> {
          AfterCommitSubmitter submitter = ctx.getBean(AfterCommitSubmitter.class);
          JdbcTemplate jdbc = ctx.getBean(JdbcTemplate.class);
          createTable(jdbc);
          String key = "order-" + UUID.randomUUID();

          AfterCommitSubmitter.Submission s =
              ctx.getBean(TransactionTemplate.class)
                  .execute(
                      status -> {
                        jdbc.update("INSERT INTO orders (id) VALUES (?)", key);
                        AfterCommitSubmitter.Submission inTx = submitter.submitAfterCommit(queue, "hello");
                        status.setRollbackOnly();
                        return inTx;
                      });

          assertThat(s.mode()).isEqualTo(AfterCommitSubmitter.Mode.DEFERRED);
          assertThat(s.result()).isCancelled();
          assertThatThrownBy(() -> s.result().join()).isInstanceOf(CancellationException.class);
          assertThat(tb.admin().listTasks(ListTasksRequest.newBuilder().setQueue(queue).build()).getTasksList())
              .as("no task of the rolled-back transaction")
              .isEmpty();
          assertThat(jdbc.queryForObject("SELECT COUNT(*) FROM orders", Integer.class)).isZero();
        });
  }

  @Test
  void submitRefusedAfterTheCommitCompletesTheResultExceptionallyAndTheCommitStands() {
    runner.run(
        ctx -> {
          AfterCommitSubmitter submitter = ctx.getBean(AfterCommitSubmitter.class);
          JdbcTemplate jdbc = ctx.getBean(JdbcTemplate.class);
          createTable(jdbc);

          AfterCommitSubmitter.Submission s =
              ctx.getBean(TransactionTemplate.class)
                  .execute(
                      status -> {
                        jdbc.update("INSERT INTO orders (id) VALUES (?)", "o-1");
                        // The broker refuses a queue name with a space (INVALID_ARGUMENT).
                        return submitter.submitAfterCommit("no such queue", "hello");
                      });

          assertThat(s.mode()).isEqualTo(AfterCommitSubmitter.Mode.DEFERRED);
          assertThat(s.result()).isCompletedExceptionally().isNotCancelled();
          assertThatThrownBy(() -> s.result().join()).hasMessageContaining("queue");
          assertThat(jdbc.queryForObject("SELECT COUNT(*) FROM orders", Integer.class))
              .as("the commit is not undone")
              .isEqualTo(1);
        });
  }

  @Test
  void withoutTransactionTheTaskIsSubmittedAtOnce() {
    runner.run(
        ctx -> {
          AfterCommitSubmitter submitter = ctx.getBean(AfterCommitSubmitter.class);
          String key = "order-" + UUID.randomUUID();

          AfterCommitSubmitter.Submission s =
              submitter.submitAfterCommit(tb.spec(queue, "hello").setKey(key).build());

          assertThat(s.mode()).isEqualTo(AfterCommitSubmitter.Mode.SUBMITTED);
          assertThat(s.deferred()).isFalse();
          assertThat(s.result()).isCompleted();
          assertThat(tasks(key)).extracting(Task::getId).containsExactly(s.result().join().getTaskId());
        });
  }
}
