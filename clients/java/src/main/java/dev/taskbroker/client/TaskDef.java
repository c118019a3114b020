package dev.taskbroker.client;

import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.TaskSpec;
import java.time.Duration;
import java.time.Instant;
import java.util.Objects;

/**
 * One queue's tasks, with payload type {@code P} and result type {@code R}, for producers and
 * workers alike (docs/client-spec.md point 20).
 *
 * <pre>{@code
 * static final TaskDef<Email, Sent> EMAILS = TaskDef.of("emails", Email.class, Sent.class);
 * Sent sent = EMAILS.submitAndWait(tb, new Email("ada@example.com"), Duration.ofSeconds(30));
 * EMAILS.submitIn(tb, new Email("bob@example.com"), Duration.ofHours(1));
 * Worker.builder(tb).task(EMAILS, (task, email) -> mailer.send(email)).build();
 * }</pre>
 */
public final class TaskDef<P, R> {
  private final String queue;
  private final Class<P> payloadType;
  private final Class<R> resultType;
  private final HandlerPolicy policy;

  private TaskDef(String queue, Class<P> payloadType, Class<R> resultType, HandlerPolicy policy) {
    this.queue = Objects.requireNonNull(queue, "queue");
    this.payloadType = Objects.requireNonNull(payloadType, "payloadType");
    this.resultType = Objects.requireNonNull(resultType, "resultType");
    this.policy = policy;
  }

  public static <P, R> TaskDef<P, R> of(String queue, Class<P> payloadType, Class<R> resultType) {
    return new TaskDef<>(queue, payloadType, resultType, null);
  }

  /** This definition with {@code policy}: its retry defaults fill every spec it makes. */
  public TaskDef<P, R> withPolicy(HandlerPolicy policy) {
    return new TaskDef<>(queue, payloadType, resultType, policy);
  }

  public String queue() {
    return queue;
  }

  public Class<P> payloadType() {
    return payloadType;
  }

  public Class<R> resultType() {
    return resultType;
  }

  /** The policy, or null. */
  public HandlerPolicy policy() {
    return policy;
  }

  /** A spec of this queue carrying {@code payload}, to add options to before submitting. */
  public TaskSpec.Builder spec(Taskbroker tb, P payload) {
    TaskSpec.Builder b = tb.spec(queue, payload);
    if (policy != null && !policy.retry().equals(RetryPolicy.getDefaultInstance())) {
      b.setRetry(HandlerPolicy.merge(b.getRetry(), policy.retry()));
    }
    return b;
  }

  public SubmitResult submit(Taskbroker tb, P payload) {
    return tb.submit(spec(tb, payload).build());
  }

  /** Submits a task not leased before {@code delay} from now. */
  public SubmitResult submitIn(Taskbroker tb, P payload, Duration delay) {
    return submitAt(tb, payload, Instant.now().plus(delay));
  }

  /** Submits a task not leased before {@code at}. */
  public SubmitResult submitAt(Taskbroker tb, P payload, Instant at) {
    return tb.submit(spec(tb, payload).setRunAt(ProtoTime.timestamp(at)).build());
  }

  /**
   * Submits, waits up to {@code timeout} and decodes the result.
   *
   * @throws TaskFailedException when the task ends DEAD or CANCELLED
   */
  public R submitAndWait(Taskbroker tb, P payload, Duration timeout) {
    return tb.result(tb.submitAndWait(spec(tb, payload).build(), timeout), resultType);
  }
}
