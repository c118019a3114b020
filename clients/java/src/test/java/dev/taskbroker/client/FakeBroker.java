package dev.taskbroker.client;

import com.google.protobuf.ByteString;
import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.CheckpointRequest;
import dev.taskbroker.v1.CheckpointResponse;
import dev.taskbroker.v1.CompleteManyRequest;
import dev.taskbroker.v1.CompleteManyResponse;
import dev.taskbroker.v1.CompleteOutcome;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.CompleteResponse;
import dev.taskbroker.v1.CompleteResult;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.FailResponse;
import dev.taskbroker.v1.HeartbeatRequest;
import dev.taskbroker.v1.HeartbeatResponse;
import dev.taskbroker.v1.LeaseRef;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeaseResponse;
import dev.taskbroker.v1.LeaseStatus;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.TaskState;
import io.grpc.Context;
import io.grpc.ManagedChannel;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * An in-memory BrokerService on an in-process gRPC server, for testing the Worker without a
 * broker. It records every call; tests steer it through {@link #add}, {@link #lostIds} and
 * {@link #cancelIds}.
 */
final class FakeBroker extends BrokerServiceGrpc.BrokerServiceImplBase implements AutoCloseable {
  final List<LeaseRequest> leases = new CopyOnWriteArrayList<>();
  final List<HeartbeatRequest> heartbeats = new CopyOnWriteArrayList<>();
  /** Every completion, by Complete or inside CompleteMany. */
  final List<CompleteRequest> completes = new CopyOnWriteArrayList<>();
  /** The plain Complete calls only. */
  final List<CompleteRequest> completeCalls = new CopyOnWriteArrayList<>();
  final List<CompleteManyRequest> completeManys = new CopyOnWriteArrayList<>();
  /** Complete calls received so far (counted before {@link #holdCompletes} is awaited). */
  final AtomicInteger completesArrived = new AtomicInteger();
  /** Complete calls wait for this before they are answered: a Complete held in flight. */
  volatile java.util.concurrent.CountDownLatch holdCompletes = new java.util.concurrent.CountDownLatch(0);
  /** When set, every CompleteMany fails with it. */
  volatile Status completeManyError;
  final List<FailRequest> fails = new CopyOnWriteArrayList<>();
  final Map<String, ByteString> checkpoints = new ConcurrentHashMap<>();
  final Set<String> lostIds = ConcurrentHashMap.newKeySet();
  final Set<String> cancelIds = ConcurrentHashMap.newKeySet();
  final AtomicInteger pendingLeases = new AtomicInteger();
  /** Complete calls answered UNAVAILABLE this many more times. */
  final AtomicInteger unavailableCompletes = new AtomicInteger();
  /** Heartbeat and Fail calls get no answer while set (a frozen broker): they hang until cancelled. */
  volatile boolean frozen;
  /** Lease length handed out with each task. */
  volatile java.time.Duration leaseLength = java.time.Duration.ofSeconds(30);

  private final ArrayDeque<LeasedTask> ready = new ArrayDeque<>();
  private final AtomicInteger seq = new AtomicInteger();
  private final Server server;
  private final ManagedChannel channel;

  FakeBroker() throws IOException {
    String name = InProcessServerBuilder.generateName();
    server = InProcessServerBuilder.forName(name).addService(this).build().start();
    channel = InProcessChannelBuilder.forName(name).build();
  }

  Taskbroker taskbroker() {
    return Taskbroker.of(channel);
  }

  /** Adds a ready task; returns its id. */
  String add(String payload, int attempt) {
    return add(payload, attempt, 0);
  }

  /** Adds a ready task at {@code attempt} of {@code maxAttempts}; returns its id. */
  String add(String payload, int attempt, int maxAttempts) {
    int n = seq.incrementAndGet();
    String id = "t" + n;
    synchronized (ready) {
      ready.add(
          LeasedTask.newBuilder()
              .setTaskId(id)
              .setQueue("q")
              .setPayload(ByteString.copyFromUtf8(payload))
              .setAttempt(attempt)
              .setMaxAttempts(maxAttempts)
              .setLeaseToken("tok-" + id)
              .setFencingToken(n)
              .build());
      ready.notifyAll();
    }
    return id;
  }

  String add(String payload) {
    return add(payload, 1);
  }

  /** Adds a ready task of {@code queue}; returns its id. */
  String add(String queue, String payload) {
    int n = seq.incrementAndGet();
    String id = "t" + n;
    synchronized (ready) {
      ready.add(
          LeasedTask.newBuilder()
              .setTaskId(id)
              .setQueue(queue)
              .setPayload(ByteString.copyFromUtf8(payload))
              .setAttempt(1)
              .setLeaseToken("tok-" + id)
              .setFencingToken(n)
              .build());
      ready.notifyAll();
    }
    return id;
  }

  /** Up to {@code max} ready tasks, at once (lease_next: no wait). */
  private List<LeasedTask> takeReady(int max) {
    List<LeasedTask> out = new java.util.ArrayList<>();
    synchronized (ready) {
      while (!ready.isEmpty() && out.size() < max) {
        out.add(
            ready.poll().toBuilder()
                .setLeaseExpiresAt(ProtoTime.timestamp(Instant.now().plus(leaseLength)))
                .build());
      }
    }
    return out;
  }

  @Override
  public void lease(LeaseRequest req, StreamObserver<LeaseResponse> out) {
    leases.add(req);
    long until = System.currentTimeMillis() + req.getWait().getSeconds() * 1000 + req.getWait().getNanos() / 1_000_000;
    LeaseResponse.Builder res = LeaseResponse.newBuilder();
    pendingLeases.incrementAndGet();
    try {
      synchronized (ready) {
        // Waits in 20 ms steps so a cancelled call is noticed.
        while (ready.isEmpty() && System.currentTimeMillis() < until && !Context.current().isCancelled()) {
          ready.wait(20);
        }
        while (!ready.isEmpty() && res.getTasksCount() < req.getMaxTasks()) {
          res.addTasks(
              ready.poll().toBuilder()
                  .setLeaseExpiresAt(ProtoTime.timestamp(Instant.now().plus(leaseLength))));
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      pendingLeases.decrementAndGet();
    }
    out.onNext(res.build());
    out.onCompleted();
  }

  @Override
  public void heartbeat(HeartbeatRequest req, StreamObserver<HeartbeatResponse> out) {
    heartbeats.add(req);
    if (frozen) {
      return; // never answered: the caller's deadline ends the call
    }
    HeartbeatResponse.Builder res = HeartbeatResponse.newBuilder();
    for (LeaseRef l : req.getLeasesList()) {
      res.addLeases(
          LeaseStatus.newBuilder()
              .setTaskId(l.getTaskId())
              .setLost(lostIds.contains(l.getTaskId()))
              .setCancelRequested(cancelIds.contains(l.getTaskId()))
              .setLeaseExpiresAt(ProtoTime.timestamp(Instant.now().plusSeconds(30))));
    }
    out.onNext(res.build());
    out.onCompleted();
  }

  @Override
  public void checkpoint(CheckpointRequest req, StreamObserver<CheckpointResponse> out) {
    if (lostIds.contains(req.getTaskId())) {
      out.onError(Status.ABORTED.withDescription("lease lost").asRuntimeException());
      return;
    }
    checkpoints.put(req.getTaskId(), req.getCheckpoint());
    out.onNext(CheckpointResponse.newBuilder().setCancelRequested(cancelIds.contains(req.getTaskId())).build());
    out.onCompleted();
  }

  @Override
  public void complete(CompleteRequest req, StreamObserver<CompleteResponse> out) {
    completesArrived.incrementAndGet();
    try {
      holdCompletes.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    if (unavailableCompletes.getAndUpdate(n -> Math.max(n - 1, 0)) > 0) {
      out.onError(Status.UNAVAILABLE.withDescription("connection refused").asRuntimeException());
      return;
    }
    completes.add(req);
    completeCalls.add(req);
    out.onNext(CompleteResponse.getDefaultInstance());
    out.onCompleted();
  }

  @Override
  public void completeMany(CompleteManyRequest req, StreamObserver<CompleteManyResponse> out) {
    completeManys.add(req);
    Status error = completeManyError;
    if (error != null) {
      out.onError(error.asRuntimeException());
      return;
    }
    CompleteManyResponse.Builder res = CompleteManyResponse.newBuilder();
    for (CompleteRequest c : req.getCompletionsList()) {
      boolean lost = lostIds.contains(c.getTaskId());
      if (!lost) {
        completes.add(c);
      }
      res.addResults(
          CompleteResult.newBuilder()
              .setTaskId(c.getTaskId())
              .setOutcome(
                  lost
                      ? CompleteOutcome.COMPLETE_OUTCOME_LEASE_LOST
                      : CompleteOutcome.COMPLETE_OUTCOME_COMPLETED));
    }
    if (req.hasLeaseNext()) {
      res.addAllNextTasks(takeReady(req.getLeaseNext().getMaxTasks()));
    }
    out.onNext(res.build());
    out.onCompleted();
  }

  @Override
  public void fail(FailRequest req, StreamObserver<FailResponse> out) {
    if (frozen) {
      return;
    }
    fails.add(req);
    TaskState state = req.getNonRetryable() ? TaskState.TASK_STATE_DEAD : TaskState.TASK_STATE_READY;
    out.onNext(FailResponse.newBuilder().setState(state).build());
    out.onCompleted();
  }

  @Override
  public void close() {
    channel.shutdownNow();
    server.shutdownNow();
  }
}
