package dev.taskbroker.client;

import dev.taskbroker.v1.AdminServiceGrpc;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskEvent;
import dev.taskbroker.v1.TaskEventKind;
import dev.taskbroker.v1.TaskState;
import dev.taskbroker.v1.WatchTasksRequest;
import dev.taskbroker.v1.WatchTasksResponse;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Waiting for tasks to finish (Flow), behind {@link Taskbroker#waitFor} and friends: the
 * tasks are followed on AdminService.WatchTasks instead of polled.
 *
 * <p>The watch is opened first and its response headers awaited (from then on every matching
 * event arrives on it), then each task is read once with GetTask: an outcome from before the
 * watch is seen by the read, one from after by the stream, so none is missed and a finished task
 * returns at once. When the stream drops (UNAVAILABLE or a clean end: a broker restart, a network
 * blip) the watch is opened again after the last event received ({@code after_event_id}) and the
 * tasks read again, with a short growing pause, until the timeout.
 */
final class TaskWaiter {
  /** How many tasks one wait follows (WatchTasks' limit). */
  static final int MAX_TASKS = 1000;

  private static final long FIRST_PAUSE_MS = 50;
  private static final long MAX_PAUSE_MS = 1000;
  /** The longest single GetTask inside a wait. */
  private static final long READ_TIMEOUT_NANOS = TimeUnit.SECONDS.toNanos(10);
  /** Only the events that can end a task are streamed. */
  private static final List<TaskEventKind> FINAL_KINDS =
      List.of(
          TaskEventKind.TASK_EVENT_KIND_SUCCEEDED,
          TaskEventKind.TASK_EVENT_KIND_DEAD,
          TaskEventKind.TASK_EVENT_KIND_CANCELLED);

  private final Channel channel;
  private final List<String> ids;
  private final Map<String, Task> done = new HashMap<>();
  private final Duration timeout;
  private final long deadline; // System.nanoTime(); Long.MAX_VALUE without a timeout
  private long after;

  private TaskWaiter(Channel channel, List<String> ids, Duration timeout) {
    this.channel = channel;
    this.ids = ids;
    this.timeout = timeout;
    this.deadline = timeout == null ? Long.MAX_VALUE : System.nanoTime() + timeout.toNanos();
  }

  /** Whether a task in this state is done: SUCCEEDED, DEAD or CANCELLED. */
  static boolean isFinal(TaskState s) {
    return s == TaskState.TASK_STATE_SUCCEEDED
        || s == TaskState.TASK_STATE_DEAD
        || s == TaskState.TASK_STATE_CANCELLED;
  }

  static List<Task> waitAll(Channel channel, List<String> taskIds, Duration timeout)
      throws InterruptedException {
    List<String> ids = new ArrayList<>(new LinkedHashSet<>(taskIds));
    if (ids.isEmpty()) {
      throw new IllegalArgumentException("taskIds is empty");
    }
    if (ids.size() > MAX_TASKS) {
      throw new IllegalArgumentException(
          ids.size() + " task ids; at most " + MAX_TASKS + " per wait");
    }
    return new TaskWaiter(channel, ids, timeout).run(taskIds);
  }

  private List<String> pending() {
    return ids.stream().filter(id -> !done.containsKey(id)).toList();
  }

  private boolean expired() {
    return deadline != Long.MAX_VALUE && System.nanoTime() - deadline >= 0;
  }

  private long leftNanos() {
    return deadline == Long.MAX_VALUE ? Long.MAX_VALUE : Math.max(1, deadline - System.nanoTime());
  }

  private WaitTimeoutException timedOut() {
    return new WaitTimeoutException(pending(), timeout);
  }

  private List<Task> run(List<String> order) throws InterruptedException {
    long pause = FIRST_PAUSE_MS;
    while (true) {
      List<String> pending = pending();
      if (pending.isEmpty()) {
        return order.stream().map(done::get).toList();
      }
      if (expired()) {
        throw timedOut();
      }
      boolean progressed;
      try {
        progressed = follow(pending);
      } catch (StatusRuntimeException e) {
        Status.Code code = e.getStatus().getCode();
        if (expired()) {
          throw timedOut();
        }
        // Only a dropped stream or an unreachable broker is worth another watch.
        if (code != Status.Code.UNAVAILABLE) {
          throw e;
        }
        progressed = false;
      }
      if (pending().isEmpty()) {
        continue;
      }
      if (progressed) {
        pause = FIRST_PAUSE_MS;
      }
      TimeUnit.NANOSECONDS.sleep(Math.min(TimeUnit.MILLISECONDS.toNanos(pause), leftNanos()));
      pause = Math.min(pause * 2, MAX_PAUSE_MS);
    }
  }

  private void read(String id) {
    Task t =
        AdminServiceGrpc.newBlockingStub(channel)
            .withDeadlineAfter(Math.min(leftNanos(), READ_TIMEOUT_NANOS), TimeUnit.NANOSECONDS)
            .getTask(GetTaskRequest.newBuilder().setTaskId(id).build())
            .getTask();
    if (isFinal(t.getState())) {
      done.put(id, t);
    }
  }

  /**
   * One watch: returns when every task finished or the stream ended cleanly (whether an event
   * arrived); throws the stream's or a read's error.
   */
  private boolean follow(List<String> pending) throws InterruptedException {
    CallOptions options = CallOptions.DEFAULT;
    if (deadline != Long.MAX_VALUE) {
      options = options.withDeadlineAfter(leftNanos(), TimeUnit.NANOSECONDS);
    }
    Watch watch = new Watch(channel.newCall(AdminServiceGrpc.getWatchTasksMethod(), options));
    boolean progressed = false;
    try {
      watch.start(
          WatchTasksRequest.newBuilder()
              .addAllTaskIds(pending)
              .addAllKinds(FINAL_KINDS)
              .setAfterEventId(after)
              .build());
      // The headers mean the broker accepted the watch: later events will arrive on it.
      Object first = watch.next(leftNanos());
      if (first == null) {
        throw timedOut();
      }
      if (first instanceof Status s) {
        return closed(s, progressed);
      }
      for (String id : pending) {
        read(id);
      }
      if (first instanceof WatchTasksResponse r) {
        progressed = true;
        handle(r);
      }
      while (!pending().isEmpty()) {
        Object o = watch.next(leftNanos());
        if (o == null) {
          throw timedOut();
        }
        if (o instanceof Status s) {
          return closed(s, progressed);
        }
        if (o instanceof WatchTasksResponse r) {
          progressed = true;
          handle(r);
        }
      }
      return progressed;
    } finally {
      watch.cancel();
    }
  }

  private void handle(WatchTasksResponse r) {
    for (TaskEvent ev : r.getEventsList()) {
      after = Math.max(after, ev.getEventId());
      if (!done.containsKey(ev.getTaskId()) && ids.contains(ev.getTaskId())) {
        read(ev.getTaskId());
      }
    }
  }

  private static boolean closed(Status s, boolean progressed) {
    if (!s.isOk()) {
      throw s.asRuntimeException();
    }
    return progressed;
  }

  /**
   * One WatchTasks call as a queue of what happened on it: {@link Metadata} (the headers), each
   * {@link WatchTasksResponse}, and last its {@link Status}.
   */
  private static final class Watch extends ClientCall.Listener<WatchTasksResponse> {
    private final ClientCall<WatchTasksRequest, WatchTasksResponse> call;
    private final LinkedBlockingQueue<Object> queue = new LinkedBlockingQueue<>();

    Watch(ClientCall<WatchTasksRequest, WatchTasksResponse> call) {
      this.call = call;
    }

    void start(WatchTasksRequest req) {
      call.start(this, new Metadata());
      call.sendMessage(req);
      call.halfClose();
      call.request(1);
    }

    /** The next thing that happened (headers skipped once seen), or null after {@code nanos}. */
    Object next(long nanos) throws InterruptedException {
      return queue.poll(nanos, TimeUnit.NANOSECONDS);
    }

    void cancel() {
      call.cancel("the wait is over", null);
    }

    @Override
    public void onHeaders(Metadata headers) {
      queue.add(headers);
    }

    @Override
    public void onMessage(WatchTasksResponse message) {
      queue.add(message);
      call.request(1);
    }

    @Override
    public void onClose(Status status, Metadata trailers) {
      queue.add(status);
    }
  }
}
