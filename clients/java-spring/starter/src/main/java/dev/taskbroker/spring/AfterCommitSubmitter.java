package dev.taskbroker.spring;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.TaskSpec;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * Submits a task once the current Spring transaction commits: inside a {@code @Transactional}
 * method (or any code with transaction synchronization active) the Submit waits for the commit
 * and is dropped on rollback; outside one it is sent at once, as {@link Taskbroker#submit} would.
 * The returned {@link Submission} says which it did.
 *
 * <pre>{@code
 * @Transactional
 * public void placeOrder(Order o) {
 *   orders.save(o);
 *   submitter.submitAfterCommit("emails", new Email(o.customer(), "order placed"));
 * }
 * }</pre>
 *
 * <p><b>Not atomic.</b> The Submit is a call to the broker after the database commit: a crash
 * (or a lost connection) between the commit and the Submit loses the task, and a Submit that
 * fails after the commit cannot roll the transaction back; the failure is logged at ERROR and
 * completes the submission's {@link Submission#result() result} exceptionally. When the task
 * must exist if and only if the transaction commits, write it into the transaction with the
 * outbox ({@code dev.taskbroker.client.Outbox}, shipped by {@code taskbroker relay}). This one
 * suits tasks whose loss on a crash is acceptable or repaired otherwise (a notification, a cache
 * refresh, work a periodic sweep also finds), and databases the outbox does not cover.
 *
 * <p>The Submit runs on the committing thread, in {@link TransactionSynchronization#afterCommit},
 * so the {@code @Transactional} method returns once the broker has answered (or the client's
 * backpressure retries are spent). Several submissions of one transaction are sent in the order
 * they were made, each on its own. With propagation {@code REQUIRED} an inner method takes part in
 * the outer transaction, so its submissions wait for the outer commit. Give the spec an
 * idempotency key ({@code setKey}) when the caller may retry the whole transaction.
 */
public class AfterCommitSubmitter {
  private static final Logger LOG = LoggerFactory.getLogger(AfterCommitSubmitter.class);

  private final Taskbroker taskbroker;

  public AfterCommitSubmitter(Taskbroker taskbroker) {
    this.taskbroker = taskbroker;
  }

  /** What {@link #submitAfterCommit} did with the task. */
  public enum Mode {
    /** Registered with the active transaction: submitted after its commit, dropped on rollback. */
    DEFERRED,
    /** No transaction synchronization was active: submitted at once, before the call returned. */
    SUBMITTED
  }

  /**
   * One submission.
   *
   * @param mode whether the Submit waits for the transaction or was sent at once
   * @param result completes with the broker's SubmitResult (the task id) when the Submit is
   *     answered; exceptionally with the client's exception when the Submit after commit failed;
   *     cancelled ({@link CancellationException}) when the transaction rolled back or ended with an
   *     unknown outcome, nothing submitted. Already complete for {@link Mode#SUBMITTED}.
   */
  public record Submission(Mode mode, CompletableFuture<SubmitResult> result) {
    public boolean deferred() {
      return mode == Mode.DEFERRED;
    }
  }

  /**
   * Submits {@code payload} (encoded now by the client's serializer, so an encoding error is
   * thrown here, inside the transaction) to {@code queue} after the current transaction commits,
   * or at once without one.
   */
  public Submission submitAfterCommit(String queue, Object payload) {
    return submitAfterCommit(taskbroker.spec(queue, payload).build());
  }

  /**
   * Submits {@code spec} after the current transaction commits, or at once without one. Without a
   * transaction the client's exceptions are thrown as {@link Taskbroker#submit(TaskSpec)} throws
   * them.
   */
  public Submission submitAfterCommit(TaskSpec spec) {
    if (!TransactionSynchronizationManager.isSynchronizationActive()) {
      return new Submission(Mode.SUBMITTED, CompletableFuture.completedFuture(taskbroker.submit(spec)));
    }
    CompletableFuture<SubmitResult> result = new CompletableFuture<>();
    TransactionSynchronizationManager.registerSynchronization(new AfterCommit(spec, result));
    return new Submission(Mode.DEFERRED, result);
  }

  private final class AfterCommit implements TransactionSynchronization {
    private final TaskSpec spec;
    private final CompletableFuture<SubmitResult> result;

    AfterCommit(TaskSpec spec, CompletableFuture<SubmitResult> result) {
      this.spec = spec;
      this.result = result;
    }

    @Override
    public void afterCommit() {
      try {
        result.complete(taskbroker.submit(spec));
      } catch (RuntimeException e) {
        LOG.error(
            "taskbroker: the transaction committed but the Submit to queue {}{} failed; the task was not submitted: {}",
            spec.getQueue(),
            spec.getKey().isEmpty() ? "" : " (key " + spec.getKey() + ")",
            e.toString());
        result.completeExceptionally(e);
      }
    }

    @Override
    public void afterCompletion(int status) {
      if (status == STATUS_COMMITTED) {
        return;
      }
      String why = status == STATUS_ROLLED_BACK ? "rolled back" : "ended with an unknown outcome";
      if (status != STATUS_ROLLED_BACK) {
        LOG.warn("taskbroker: the transaction {}; the task for queue {} was not submitted", why, spec.getQueue());
      }
      result.completeExceptionally(
          new CancellationException("the transaction " + why + ": the task for queue " + spec.getQueue() + " was not submitted"));
    }
  }
}
