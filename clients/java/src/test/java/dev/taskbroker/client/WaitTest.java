package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.taskbroker.v1.AdminServiceGrpc;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.GetTaskResponse;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskEvent;
import dev.taskbroker.v1.TaskEventKind;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import dev.taskbroker.v1.WatchTasksRequest;
import dev.taskbroker.v1.WatchTasksResponse;
import io.grpc.ForwardingServerCall;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.BiConsumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Flow: {@link Taskbroker#waitFor} follows WatchTasks, against an in-process fake
 * AdminService that, like the broker, sends a watch's headers before any event, and drops a
 * stream to show the reconnect with after_event_id. Also the dependency fields on submitAll.
 */
class WaitTest {
  /** The fake: task states by id; each WatchTasks call runs the next script. */
  static final class FakeAdmin extends AdminServiceGrpc.AdminServiceImplBase {
    final Map<String, TaskState> states = new ConcurrentHashMap<>();
    final List<WatchTasksRequest> watches = new CopyOnWriteArrayList<>();
    /** The methods of the calls started, in order (recorded when each call starts). */
    final List<String> started = new CopyOnWriteArrayList<>();
    final ArrayDeque<BiConsumer<WatchTasksRequest, StreamObserver<WatchTasksResponse>>> scripts =
        new ArrayDeque<>();

    @Override
    public void getTask(GetTaskRequest req, StreamObserver<GetTaskResponse> out) {
      TaskState s = states.get(req.getTaskId());
      if (s == null) {
        out.onError(Status.NOT_FOUND.withDescription("task_id: no such task").asException());
        return;
      }
      Task.Builder task = Task.newBuilder().setId(req.getTaskId()).setState(s);
      if (s == TaskState.TASK_STATE_DEAD || s == TaskState.TASK_STATE_CANCELLED) {
        task.setLastError("boom-" + req.getTaskId());
      } else {
        task.setResult(ByteString.copyFromUtf8("r-" + req.getTaskId()));
      }
      out.onNext(GetTaskResponse.newBuilder().setTask(task).build());
      out.onCompleted();
    }

    @Override
    public void watchTasks(WatchTasksRequest req, StreamObserver<WatchTasksResponse> out) {
      watches.add(req);
      var script = scripts.poll();
      if (script != null) {
        script.accept(req, out);
      }
      // Without a script: send nothing until the client goes away.
    }
  }

  /** Sends the response headers as soon as a call starts, as the broker does for a watch. */
  static final class EarlyHeaders implements ServerInterceptor {
    private final List<String> started;

    EarlyHeaders(List<String> started) {
      this.started = started;
    }

    @Override
    public <Q, R> ServerCall.Listener<Q> interceptCall(
        ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
      started.add(call.getMethodDescriptor().getBareMethodName());
      call.sendHeaders(new Metadata());
      return next.startCall(
          new ForwardingServerCall.SimpleForwardingServerCall<>(call) {
            @Override
            public void sendHeaders(Metadata h) {}
          },
          headers);
    }
  }

  private FakeAdmin fake;
  private Server server;
  private Taskbroker tb;

  @BeforeEach
  void setUp() throws Exception {
    fake = new FakeAdmin();
    fake.states.put("t1", TaskState.TASK_STATE_LEASED);
    fake.states.put("t2", TaskState.TASK_STATE_READY);
    fake.states.put("done", TaskState.TASK_STATE_SUCCEEDED);
    String name = InProcessServerBuilder.generateName();
    server =
        InProcessServerBuilder.forName(name)
            .addService(ServerInterceptors.intercept(fake, new EarlyHeaders(fake.started)))
            .build()
            .start();
    tb = Taskbroker.of(InProcessChannelBuilder.forName(name).build());
  }

  @AfterEach
  void tearDown() {
    tb.close();
    server.shutdownNow();
  }

  private static WatchTasksResponse succeeded(long eventId, String taskId) {
    return WatchTasksResponse.newBuilder()
        .addEvents(
            TaskEvent.newBuilder()
                .setEventId(eventId)
                .setTaskId(taskId)
                .setKind(TaskEventKind.TASK_EVENT_KIND_SUCCEEDED)
                .setState(TaskState.TASK_STATE_SUCCEEDED))
        .build();
  }

  @Test
  void aFinishedTaskReturnsAtOnceAfterTheWatchOpened() throws Exception {
    Task t = tb.waitFor("done", Duration.ofSeconds(30));
    assertEquals(TaskState.TASK_STATE_SUCCEEDED, t.getState());
    assertEquals("r-done", t.getResult().toStringUtf8());
    // The watch was open (its headers came back) before the state was read. Its request
    // may never reach the fake's handler: the client cancels the watch once the state
    // says done, and that can overtake the request (the resume test checks requests).
    assertEquals(List.of("WatchTasks", "GetTask"), fake.started);
  }

  @Test
  void resumesAfterTheLastEventWhenTheStreamDrops() throws Exception {
    fake.scripts.add(
        (req, out) -> {
          fake.states.put("t1", TaskState.TASK_STATE_SUCCEEDED);
          out.onNext(succeeded(7, "t1"));
          out.onError(Status.UNAVAILABLE.withDescription("the broker is restarting").asException());
        });
    fake.scripts.add(
        (req, out) -> {
          fake.states.put("t2", TaskState.TASK_STATE_SUCCEEDED);
          out.onNext(succeeded(9, "t2"));
        });
    List<Task> tasks = tb.waitForAll(List.of("t1", "t2"), Duration.ofSeconds(30));
    assertEquals(List.of("t1", "t2"), tasks.stream().map(Task::getId).toList());
    assertTrue(tasks.stream().allMatch(t -> t.getState() == TaskState.TASK_STATE_SUCCEEDED));
    assertEquals(2, fake.watches.size());
    WatchTasksRequest first = fake.watches.get(0);
    WatchTasksRequest second = fake.watches.get(1);
    assertEquals(List.of("t1", "t2"), first.getTaskIdsList());
    assertEquals(0, first.getAfterEventId());
    assertTrue(first.getKindsList().contains(TaskEventKind.TASK_EVENT_KIND_SUCCEEDED));
    // Resumed after event 7, for the task still running.
    assertEquals(List.of("t2"), second.getTaskIdsList());
    assertEquals(7, second.getAfterEventId());
  }

  @Test
  void aTaskThatEndedDeadOrCancelledThrowsTaskFailedException() throws Exception {
    fake.states.put("dead", TaskState.TASK_STATE_DEAD);
    fake.states.put("gone", TaskState.TASK_STATE_CANCELLED);
    for (Map.Entry<String, TaskState> c :
        Map.of("dead", TaskState.TASK_STATE_DEAD, "gone", TaskState.TASK_STATE_CANCELLED)
            .entrySet()) {
      String id = c.getKey();
      TaskFailedException waited =
          assertThrows(TaskFailedException.class, () -> tb.waitFor(id, Duration.ofSeconds(30)));
      // The typed getter says the same of the task as read.
      TaskFailedException read =
          assertThrows(TaskFailedException.class, () -> tb.result(waited.task(), String.class));
      for (TaskFailedException e : List.of(waited, read)) {
        assertEquals(id, e.taskId());
        assertEquals(c.getValue(), e.state());
        assertEquals("boom-" + id, e.lastError());
        assertEquals(
            "task " + id + " ended " + c.getValue().name().substring(11) + ": boom-" + id,
            e.getMessage());
        assertTrue(e instanceof TaskbrokerException);
      }
      // waitForAll returns the tasks whatever their state.
      assertEquals(c.getValue(), tb.waitForAll(List.of(id), Duration.ofSeconds(30)).get(0).getState());
    }
    TaskbrokerException notYet =
        assertThrows(
            TaskbrokerException.class,
            () ->
                tb.result(
                    Task.newBuilder().setId("t3").setState(TaskState.TASK_STATE_READY).build(),
                    String.class));
    assertEquals("task t3 is READY, not SUCCEEDED: it has no result", notYet.getMessage());
  }

  @Test
  void givesUpAtTheTimeout() {
    WaitTimeoutException e =
        assertThrows(
            WaitTimeoutException.class, () -> tb.waitFor("t1", Duration.ofMillis(300)));
    assertEquals(List.of("t1"), e.taskIds());
  }

  @Test
  void anInterruptThrowsUncheckedAndKeepsTheInterruptFlag() {
    Thread.currentThread().interrupt();
    WaitInterruptedException e =
        assertThrows(
            WaitInterruptedException.class, () -> tb.waitFor("t1", Duration.ofSeconds(30)));
    // Thread.interrupted() reads and clears the flag the wait set again.
    assertTrue(Thread.interrupted(), "the interrupt flag is set again");
    assertEquals(List.of("t1"), e.taskIds());
    assertTrue(e.getCause() instanceof InterruptedException, String.valueOf(e.getCause()));
  }

  @Test
  void throwsWhatIsNotADroppedStream() {
    StatusRuntimeException e =
        assertThrows(
            StatusRuntimeException.class, () -> tb.waitFor("nope", Duration.ofSeconds(5)));
    assertEquals(Status.Code.NOT_FOUND, e.getStatus().getCode());
  }

  @Test
  void dependencyFieldsAreSpecFields() {
    TaskSpec s =
        TaskSpec.newBuilder()
            .setQueue("q")
            .addDependsOn("a")
            .addDependsOnIndex(0)
            .setRunIfDependencyFails(true)
            .build();
    assertEquals(List.of("a"), s.getDependsOnList());
    assertEquals(List.of(0), s.getDependsOnIndexList());
    assertTrue(s.getRunIfDependencyFails());
  }
}
