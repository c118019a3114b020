package dev.taskbroker.client.testing;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.JsonSerializer;
import dev.taskbroker.client.Middleware;
import dev.taskbroker.client.Registration;
import dev.taskbroker.client.Serializer;
import dev.taskbroker.client.TaskFailedException;
import dev.taskbroker.client.TaskHandler;
import dev.taskbroker.client.TaskbrokerException;
import dev.taskbroker.client.TypedHandler;
import dev.taskbroker.client.WaitTimeoutException;
import dev.taskbroker.v1.CancelReason;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * An in-process stand-in for a broker and a worker together, with the producer calls of {@link
 * dev.taskbroker.client.Taskbroker} ({@code submit}, {@code spec}, {@code submitAll}, {@code
 * waitFor}, {@code waitForAll}, {@code submitAndWait}, {@code result}) and the handler
 * registration of {@link dev.taskbroker.client.Worker.Builder} ({@code handle}, {@code register},
 * {@code registrations}, {@code middleware}).
 *
 * <p>A submit runs the queue's handler at once, on the calling thread, retrying as the broker
 * would (up to max_attempts, 3 by default, 1 for at_most_once; a PermanentException ends it; no
 * backoff, run_at not waited for), so the task is finished when {@code submit} returns. A task of
 * a queue with no handler stays READY ({@code waitFor} throws WaitTimeoutException); {@link
 * #runPending} runs it once a handler is registered. Keys deduplicate as on the broker.
 *
 * <pre>{@code
 * InMemoryBroker tb = new InMemoryBroker().handle("emails", Email.class, (ctx, e) -> send(e));
 * Task t = tb.submitAndWait(tb.spec("emails", new Email("ada@example.com")).build(), Duration.ofSeconds(1));
 * Receipt r = tb.result(t, Receipt.class);
 * }</pre>
 */
public final class InMemoryBroker implements AutoCloseable {
  private final Serializer serializer;
  private final Map<String, Registration> registrations = new LinkedHashMap<>();
  private final List<Middleware> middleware = new CopyOnWriteArrayList<>();
  private final Map<String, Task.Builder> tasks = new LinkedHashMap<>();
  private final Map<String, List<Outcome>> outcomes = new LinkedHashMap<>();

  /** JSON payloads and results, as a client's default. */
  public InMemoryBroker() {
    this(new JsonSerializer());
  }

  public InMemoryBroker(Serializer serializer) {
    this.serializer = Objects.requireNonNull(serializer, "serializer");
  }

  public Serializer serializer() {
    return serializer;
  }

  /** Tasks of {@code queue} go to {@code handler} with their payload decoded into a {@code T}. */
  public <T> InMemoryBroker handle(String queue, Class<T> type, TypedHandler<? super T, ?> handler) {
    return register(Registration.of(queue, type, handler));
  }

  /** Tasks of {@code queue} go to {@code handler} as raw bytes. */
  public InMemoryBroker handle(String queue, TaskHandler handler) {
    return register(Registration.raw(queue, handler));
  }

  /** One queue and its handler; one handler per queue. */
  public synchronized InMemoryBroker register(Registration registration) {
    if (registrations.putIfAbsent(registration.queue(), registration) != null) {
      throw new IllegalArgumentException("queue " + registration.queue() + " has a handler already");
    }
    return this;
  }

  /** {@link #register} for each (the handlers a framework discovered). */
  public InMemoryBroker registrations(Collection<Registration> all) {
    all.forEach(this::register);
    return this;
  }

  /** Runs {@code m} around every handler call; the first added is the outermost. */
  public InMemoryBroker middleware(Middleware m) {
    middleware.add(Objects.requireNonNull(m, "middleware"));
    return this;
  }

  /** As {@code Taskbroker.spec}: a spec whose payload is {@code payload} encoded by the serializer. */
  public TaskSpec.Builder spec(String queue, Object payload) {
    byte[] bytes =
        payload == null ? new byte[0] : payload instanceof byte[] raw ? raw : serializer.encode(payload);
    return TaskSpec.newBuilder().setQueue(queue).setPayload(ByteString.copyFrom(bytes));
  }

  public SubmitResult submit(String queue, Object payload) {
    return submit(spec(queue, payload).build());
  }

  /** The delay is not waited for: the task runs at once. */
  public SubmitResult submit(String queue, Object payload, Duration delay) {
    return submit(spec(queue, payload).build());
  }

  public SubmitResult submit(String queue, byte[] payload) {
    return submit(spec(queue, payload).build());
  }

  public SubmitResult submit(TaskSpec spec) {
    return submitAll(List.of(spec)).get(0);
  }

  /** All or none, as one SubmitRequest: the results in order. */
  public List<SubmitResult> submitAll(List<TaskSpec> specs) {
    if (specs.isEmpty() || specs.size() > 1000) {
      throw new IllegalArgumentException("a Submit carries 1 to 1000 tasks, not " + specs.size());
    }
    for (TaskSpec s : specs) {
      if (s.getQueue().isEmpty()) {
        throw new IllegalArgumentException("a task's queue is required");
      }
    }
    List<SubmitResult> results = new ArrayList<>();
    List<String> created = new ArrayList<>();
    synchronized (this) {
      for (TaskSpec s : specs) {
        String existing = byKey(s.getQueue(), s.getKey());
        if (existing != null) {
          results.add(SubmitResult.newBuilder().setTaskId(existing).setDeduplicated(true).build());
          continue;
        }
        int max = s.getAtMostOnce() ? 1 : s.getRetry().getMaxAttempts();
        if (max == 0) {
          max = TestTaskContext.DEFAULT_MAX_ATTEMPTS;
        }
        List<String> deps = new ArrayList<>(s.getDependsOnList());
        for (int i : s.getDependsOnIndexList()) {
          if (i < results.size()) {
            deps.add(results.get(i).getTaskId());
          }
        }
        String id = TestTaskContext.newId();
        Task.Builder t =
            Task.newBuilder()
                .setId(id)
                .setQueue(s.getQueue())
                .setPayload(s.getPayload())
                .setKey(s.getKey())
                .setPriority(s.getPriority())
                .putAllMetadata(s.getMetadataMap())
                .setState(TaskState.TASK_STATE_READY)
                .setMaxAttempts(max)
                .setConcurrencyKey(s.getConcurrencyKey())
                .setBucket(s.getBucket())
                .addAllDependsOn(deps)
                .setRunIfDependencyFails(s.getRunIfDependencyFails())
                .setAtMostOnce(s.getAtMostOnce())
                .setCreatedAt(TestTaskContext.timestamp(Instant.now()));
        if (s.hasCheckpoint()) {
          // The first attempt starts from it, as on a broker.
          t.setCheckpoint(s.getCheckpoint()).setHasCheckpoint(true);
        }
        if (s.hasRetry()) {
          t.setRetry(s.getRetry());
        }
        if (s.hasDeadline()) {
          t.setDeadline(s.getDeadline());
        }
        tasks.put(id, t);
        outcomes.put(id, new ArrayList<>());
        created.add(id);
        results.add(SubmitResult.newBuilder().setTaskId(id).build());
      }
    }
    created.forEach(this::run);
    return results;
  }

  private String byKey(String queue, String key) {
    if (key.isEmpty()) {
      return null;
    }
    for (Task.Builder t : tasks.values()) {
      if (t.getQueue().equals(queue) && t.getKey().equals(key)) {
        return t.getId();
      }
    }
    return null;
  }

  /** Runs the task's attempts until it is finished, or it cannot run (no handler yet). */
  private void run(String id) {
    while (true) {
      Registration reg;
      TestTaskContext ctx;
      Task.Builder t;
      synchronized (this) {
        t = tasks.get(id);
        reg = registrations.get(t.getQueue());
        if (reg == null || t.getState() != TaskState.TASK_STATE_READY) {
          return;
        }
        TestTaskContext.Builder b =
            TestTaskContext.builder(t.getQueue(), t.getPayload().toByteArray())
                .taskId(id)
                .key(t.getKey())
                .attempt(t.getAttempt() + 1)
                .maxAttempts(t.getMaxAttempts())
                .fencingToken(t.getAttempt() + 1)
                .serializer(serializer);
        t.getMetadataMap().forEach(b::metadata);
        for (String dep : t.getDependsOnList()) {
          Task.Builder d = tasks.get(dep);
          if (d != null && d.getState() == TaskState.TASK_STATE_SUCCEEDED) {
            b.dependencyResult(dep, d.getResult().toByteArray());
          } else if (!t.getRunIfDependencyFails()) {
            t.setState(TaskState.TASK_STATE_CANCELLED)
                .setCancelReason(CancelReason.CANCEL_REASON_DEPENDENCY_FAILED)
                .setFinishedAt(TestTaskContext.timestamp(Instant.now()));
            return;
          }
        }
        if (t.getHasCheckpoint()) {
          b.checkpoint(t.getCheckpoint().toByteArray());
        }
        if (t.getAtMostOnce()) {
          b.atMostOnce();
        }
        t.setAttempt(t.getAttempt() + 1);
        ctx = b.build();
      }
      Outcome out = ctx.run(reg, middleware);
      synchronized (this) {
        outcomes.get(id).add(out);
        ctx.context()
            .lastCheckpoint()
            .ifPresent(cp -> t.setCheckpoint(cp).setHasCheckpoint(true));
        t.setUpdatedAt(TestTaskContext.timestamp(Instant.now()));
        if (out.succeeded()) {
          t.setState(TaskState.TASK_STATE_SUCCEEDED).setResult(ByteString.copyFrom(out.result()));
        } else {
          t.setLastError(out.errorMessage());
          if (out.retryable() && t.getAttempt() < t.getMaxAttempts()) {
            continue;
          }
          t.setState(TaskState.TASK_STATE_DEAD);
        }
        t.setFinishedAt(TestTaskContext.timestamp(Instant.now()));
        return;
      }
    }
  }

  /** Runs every READY task whose queue has a handler now; how many ran. */
  public int runPending() {
    List<String> ready = new ArrayList<>();
    synchronized (this) {
      tasks.forEach(
          (id, t) -> {
            if (t.getState() == TaskState.TASK_STATE_READY && registrations.containsKey(t.getQueue())) {
              ready.add(id);
            }
          });
    }
    ready.forEach(this::run);
    return ready.size();
  }

  /** The task as the fake holds it. */
  public synchronized Task getTask(String taskId) {
    Task.Builder t = tasks.get(taskId);
    if (t == null) {
      throw new TaskbrokerException("task " + taskId + " not found");
    }
    return t.build();
  }

  /** Every task submitted, in order. */
  public synchronized List<Task> tasks() {
    return tasks.values().stream().map(Task.Builder::build).toList();
  }

  /** The task's attempts' outcomes, in order. */
  public synchronized List<Outcome> outcomes(String taskId) {
    return List.copyOf(outcomes.getOrDefault(taskId, List.of()));
  }

  /**
   * As {@code Taskbroker.waitFor}: the SUCCEEDED task; TaskFailedException for DEAD or
   * CANCELLED; WaitTimeoutException for a task that has not run (it never will by waiting).
   */
  public Task waitFor(String taskId, Duration timeout) {
    Task t = getTask(taskId);
    if (t.getState() == TaskState.TASK_STATE_DEAD || t.getState() == TaskState.TASK_STATE_CANCELLED) {
      throw new TaskFailedException(t);
    }
    if (t.getState() != TaskState.TASK_STATE_SUCCEEDED) {
      throw new WaitTimeoutException(List.of(taskId), timeout == null ? Duration.ZERO : timeout);
    }
    return t;
  }

  /** As {@code Taskbroker.waitForAll}: the tasks in the order given, whatever their final state. */
  public List<Task> waitForAll(List<String> taskIds, Duration timeout) {
    List<Task> out = new ArrayList<>();
    List<String> pending = new ArrayList<>();
    for (String id : taskIds) {
      Task t = getTask(id);
      TaskState s = t.getState();
      if (s != TaskState.TASK_STATE_SUCCEEDED && s != TaskState.TASK_STATE_DEAD && s != TaskState.TASK_STATE_CANCELLED) {
        pending.add(id);
      }
      out.add(t);
    }
    if (!pending.isEmpty()) {
      throw new WaitTimeoutException(pending, timeout == null ? Duration.ZERO : timeout);
    }
    return out;
  }

  public Task submitAndWait(TaskSpec spec, Duration timeout) {
    return waitFor(submit(spec).getTaskId(), timeout);
  }

  /** As {@code Taskbroker.result}: a SUCCEEDED task's result decoded into {@code type}. */
  public <R> R result(Task task, Class<R> type) {
    if (task.getState() == TaskState.TASK_STATE_DEAD || task.getState() == TaskState.TASK_STATE_CANCELLED) {
      throw new TaskFailedException(task);
    }
    if (task.getState() != TaskState.TASK_STATE_SUCCEEDED) {
      throw new TaskbrokerException("task " + task.getId() + " is not SUCCEEDED: it has no result");
    }
    if (task.getResult().isEmpty()) {
      return null;
    }
    byte[] bytes = task.getResult().toByteArray();
    return type == byte[].class ? type.cast(bytes) : serializer.decode(bytes, type);
  }

  @Override
  public void close() {}
}
