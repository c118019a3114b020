package dev.taskbroker.client;

import dev.taskbroker.v1.AdminServiceGrpc;
import dev.taskbroker.v1.BrokerServiceGrpc;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.TlsChannelCredentials;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.concurrent.TimeUnit;

/**
 * A connection to one broker: a gRPC channel (plaintext, TLS or mTLS, with an optional bearer
 * token) and blocking stubs for BrokerService and AdminService. Close it when done.
 *
 * <pre>{@code
 * try (Taskbroker tb = Taskbroker.builder("broker:50051")
 *     .token(System.getenv("TASKBROKER_TOKEN"))
 *     .tls(new File("ca.pem"), new File("client.pem"), new File("client.key"))
 *     .build()) { ... }
 * }</pre>
 */
public final class Taskbroker implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger("dev.taskbroker.client");
  private final ManagedChannel channel;
  private final Serializer serializer;
  /** Retry defaults by queue, declared with handlers ({@link HandlerPolicy}). */
  private final java.util.Map<String, dev.taskbroker.v1.RetryPolicy> retryDefaults =
      new java.util.concurrent.ConcurrentHashMap<>();

  private Taskbroker(ManagedChannel channel, Serializer serializer) {
    this.channel = channel;
    this.serializer = serializer;
  }

  /** Connects to {@code host:port} over plaintext HTTP/2. */
  public static Taskbroker connect(String address) {
    return builder(address).build();
  }

  /** Connection settings for {@code host:port}: token, TLS. */
  public static Builder builder(String address) {
    return new Builder(address);
  }

  /**
   * Connects with the standard environment (docs/client-spec.md, point 8): {@code
   * TASKBROKER_TOKEN}, {@code TASKBROKER_CA} (turns TLS on), {@code TASKBROKER_CLIENT_CERT} and
   * {@code TASKBROKER_CLIENT_KEY} (mTLS).
   */
  public static Taskbroker fromEnv(String address) {
    return builderFromEnv(address).build();
  }

  /** The settings {@link #fromEnv} connects with, to add to (an interceptor, a serializer). */
  public static Builder builderFromEnv(String address) {
    Builder b = builder(address).token(System.getenv("TASKBROKER_TOKEN"));
    String ca = System.getenv("TASKBROKER_CA");
    String cert = System.getenv("TASKBROKER_CLIENT_CERT");
    String key = System.getenv("TASKBROKER_CLIENT_KEY");
    if (present(ca) || present(cert) || present(key)) {
      b.tls(
          present(ca) ? new File(ca) : null,
          present(cert) ? new File(cert) : null,
          present(key) ? new File(key) : null);
    }
    return b;
  }

  private static boolean present(String s) {
    return s != null && !s.isEmpty();
  }

  /** How to connect; see {@link #builder(String)}. */
  public static final class Builder {
    private final String address;
    private String token;
    private ChannelCredentials credentials = InsecureChannelCredentials.create();
    private Serializer serializer = new JsonSerializer();
    private final java.util.List<ClientInterceptor> interceptors = new java.util.ArrayList<>();

    private Builder(String address) {
      this.address = address;
    }

    /** Sends {@code authorization: Bearer TOKEN} on every call; null or empty sends nothing. */
    public Builder token(String token) {
      this.token = token;
      return this;
    }

    /** TLS with the JDK's default trust store. */
    public Builder tls() {
      this.credentials = TlsChannelCredentials.create();
      return this;
    }

    /**
     * TLS trusting the PEM CA in {@code ca} (null: the JDK's trust store) and, when {@code cert}
     * and {@code key} are given, presenting that client certificate (mTLS; key in PKCS#8 PEM).
     */
    public Builder tls(File ca, File cert, File key) {
      if ((cert == null) != (key == null)) {
        throw new IllegalArgumentException("give both a client certificate and its key, or neither");
      }
      try {
        TlsChannelCredentials.Builder tls = TlsChannelCredentials.newBuilder();
        if (ca != null) {
          tls.trustManager(ca);
        }
        if (cert != null) {
          tls.keyManager(cert, key);
        }
        this.credentials = tls.build();
      } catch (IOException e) {
        throw new UncheckedIOException("cannot read the TLS files: " + e.getMessage(), e);
      }
      return this;
    }

    /** Any grpc-java channel credentials (ALTS, a custom trust manager, ...). */
    public Builder credentials(ChannelCredentials credentials) {
      this.credentials = credentials;
      return this;
    }

    /**
     * How {@link Taskbroker#submit(String, Object)} encodes payloads and {@link Taskbroker#result}
     * decodes results; workers built on this client use it too. Default {@link JsonSerializer}.
     */
    public Builder serializer(Serializer serializer) {
      this.serializer = java.util.Objects.requireNonNull(serializer, "serializer");
      return this;
    }

    /** Adds a grpc-java interceptor to every call on the channel (logging, metrics, ...). */
    public Builder intercept(ClientInterceptor interceptor) {
      interceptors.add(java.util.Objects.requireNonNull(interceptor, "interceptor"));
      return this;
    }

    public Taskbroker build() {
      var b =
          Grpc.newChannelBuilder(address, credentials)
              // Leases are long-polled for up to a minute: keep idle connections alive past that.
              .keepAliveTime(30, TimeUnit.SECONDS);
      b.intercept(new TraceHeader());
      if (token != null && !token.isEmpty()) {
        b.intercept(new BearerToken(token));
      }
      b.intercept(interceptors);
      return new Taskbroker(b.build(), serializer);
    }
  }

  /** Sends the current OpenTelemetry context as the {@code traceparent} header of every call. */
  private static final class TraceHeader implements ClientInterceptor {
    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(
        MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          Tracing.headers(io.opentelemetry.context.Context.current())
              .forEach(
                  (k, v) -> headers.put(Metadata.Key.of(k, Metadata.ASCII_STRING_MARSHALLER), v));
          super.start(listener, headers);
        }
      };
    }
  }

  /**
   * Adds the bearer token to every call: an interceptor rather than CallCredentials, so the token
   * also works on a plaintext channel inside a mesh that encrypts between pods.
   */
  private static final class BearerToken implements ClientInterceptor {
    private static final Metadata.Key<String> AUTHORIZATION =
        Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    private final String value;

    BearerToken(String token) {
      this.value = "Bearer " + token;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(
        MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          headers.put(AUTHORIZATION, value);
          super.start(listener, headers);
        }
      };
    }
  }

  /** Wraps a channel built by the caller (TLS, interceptors); closing this closes it too. */
  public static Taskbroker of(ManagedChannel channel) {
    return new Taskbroker(channel, new JsonSerializer());
  }

  /** {@link #of(ManagedChannel)} with another serializer for typed payloads and results. */
  public static Taskbroker of(ManagedChannel channel, Serializer serializer) {
    return new Taskbroker(channel, java.util.Objects.requireNonNull(serializer, "serializer"));
  }

  /** The serializer of typed payloads and results (JSON unless the builder set another). */
  public Serializer serializer() {
    return serializer;
  }

  /**
   * Submits {@code payload}, encoded by the serializer (JSON by default), to {@code queue}:
   * {@code tb.submit("emails", new Email("a@example.com", "hi"))}. For more options build the
   * spec with {@link #spec(String, Object)}: every TaskSpec field has its setter there (priority,
   * run_at ({@code setRunAt(ProtoTime.fromNow(delay))} or {@code ProtoTime.timestamp(instant)}), retry, concurrency_key, bucket, checkpoint ({@code setCheckpoint(ByteString)}: the first attempt's checkpoint), depends_on_keys, on_duplicate_key, at_most_once, ...), and
   * the SubmitResult says {@code getDeduplicated()} and {@code getReplaced()}. Backpressure is
   * retried as {@link #submit(dev.taskbroker.v1.TaskSpec)} says.
   *
   * @throws SerializationException when the serializer cannot encode it (nothing is sent)
   */
  public dev.taskbroker.v1.SubmitResult submit(String queue, Object payload) {
    return submit(spec(queue, payload).build());
  }

  /**
   * Submits {@code payload} (encoded as {@link #submit(String, Object)} does) to {@code queue},
   * SCHEDULED for {@code delay}: its run_at is this machine's clock now plus {@code delay} (the
   * broker compares run_at with its own clock). {@code tb.submit("emails", email,
   * Duration.ofMinutes(5))}; for an absolute time, {@code tb.spec(queue,
   * payload).setRunAt(ProtoTime.timestamp(instant))}.
   */
  public dev.taskbroker.v1.SubmitResult submit(
      String queue, Object payload, java.time.Duration delay) {
    return submit(spec(queue, payload).setRunAt(ProtoTime.fromNow(delay)).build());
  }

  /** Submits raw bytes to {@code queue}, as they are. */
  public dev.taskbroker.v1.SubmitResult submit(String queue, byte[] payload) {
    return submit(
        dev.taskbroker.v1.TaskSpec.newBuilder()
            .setQueue(queue)
            .setPayload(com.google.protobuf.ByteString.copyFrom(payload))
            .build());
  }

  /**
   * A task spec for {@code queue} whose payload is {@code payload} encoded by the serializer
   * (bytes as they are; null: empty), to add options to and pass to {@link
   * #submit(dev.taskbroker.v1.TaskSpec)} or {@link #submitAll}.
   */
  public dev.taskbroker.v1.TaskSpec.Builder spec(String queue, Object payload) {
    byte[] bytes =
        payload == null
            ? new byte[0]
            : payload instanceof byte[] raw ? raw : serializer.encode(payload);
    return dev.taskbroker.v1.TaskSpec.newBuilder()
        .setQueue(queue)
        .setPayload(com.google.protobuf.ByteString.copyFrom(bytes));
  }

  /**
   * A SUCCEEDED task's result decoded into {@code type} by the serializer ({@code byte[]}: the
   * bytes as they are); null when the task has no result.
   *
   * @throws TaskFailedException when the task ended DEAD or CANCELLED
   * @throws TaskbrokerException when the task has not finished yet
   * @throws SerializationException when the result does not decode into {@code type}
   */
  public <R> R result(dev.taskbroker.v1.Task task, Class<R> type) {
    TaskFailedException.throwIfFailed(task);
    dev.taskbroker.v1.TaskState state = task.getState();
    if (state != dev.taskbroker.v1.TaskState.TASK_STATE_SUCCEEDED
        && state != dev.taskbroker.v1.TaskState.TASK_STATE_UNSPECIFIED) {
      throw new TaskbrokerException(
          "task "
              + task.getId()
              + " is "
              + TaskFailedException.stateName(state)
              + ", not SUCCEEDED: it has no result");
    }
    if (task.getResult().isEmpty()) {
      return null;
    }
    byte[] bytes = task.getResult().toByteArray();
    return type == byte[].class ? type.cast(bytes) : serializer.decode(bytes, type);
  }

  /**
   * Makes {@code retry} the defaults of {@code queue}'s tasks submitted through this client: each
   * fills the fields a task's own retry leaves unset ({@link HandlerPolicy}). {@link
   * Worker.Builder#policy} calls it.
   */
  public void setRetryDefaults(String queue, dev.taskbroker.v1.RetryPolicy retry) {
    if (retry.equals(dev.taskbroker.v1.RetryPolicy.getDefaultInstance())) {
      retryDefaults.remove(queue);
    } else {
      retryDefaults.put(queue, retry);
    }
  }

  private dev.taskbroker.v1.SubmitRequest withRetryDefaults(dev.taskbroker.v1.SubmitRequest req) {
    if (retryDefaults.isEmpty()) {
      return req;
    }
    dev.taskbroker.v1.SubmitRequest.Builder b = req.toBuilder();
    for (int i = 0; i < b.getTasksCount(); i++) {
      dev.taskbroker.v1.RetryPolicy d = retryDefaults.get(b.getTasks(i).getQueue());
      if (d != null) {
        b.setTasks(i, b.getTasks(i).toBuilder().setRetry(HandlerPolicy.merge(b.getTasks(i).getRetry(), d)));
      }
    }
    return b.build();
  }

  public ManagedChannel channel() {
    return channel;
  }

  /** A blocking BrokerService stub; set a deadline per call with {@code withDeadlineAfter}. */
  public BrokerServiceGrpc.BrokerServiceBlockingStub broker() {
    return BrokerServiceGrpc.newBlockingStub(channel);
  }

  /**
   * Submits one task with a 10 s deadline; the current OpenTelemetry context's traceparent goes
   * into its metadata (see {@link Tracing#inject}). A refusal for backpressure
   * (RESOURCE_EXHAUSTED with a RetryInfo) is sent again after the hinted delay, at most 10 s
   * each and 5 tries in all, then thrown.
   */
  public dev.taskbroker.v1.SubmitResult submit(dev.taskbroker.v1.TaskSpec spec) {
    dev.taskbroker.v1.TaskSpec withTrace = Tracing.inject(spec.toBuilder()).build();
    return send(dev.taskbroker.v1.SubmitRequest.newBuilder().addTasks(withTrace).build())
        .getResults(0);
  }

  /**
   * Sends a SubmitRequest with a 10 s deadline per attempt. A refusal for backpressure (a
   * queue's max_pending: RESOURCE_EXHAUSTED with a RetryInfo) is sent again after the hinted
   * delay, at most 10 s each and 5 tries in all ({@link ErrorDetails#submitRetryDelay}); then it is
   * thrown. An interrupt during the wait throws the refusal with the interrupt flag set.
   */
  @SuppressWarnings("try") // the scope is what makes the span current for the call
  private dev.taskbroker.v1.SubmitResponse send(dev.taskbroker.v1.SubmitRequest given) {
    // One send span around the resends; its context is the tasks' creation context.
    Tracing.Send span = Tracing.send(withRetryDefaults(given));
    try (io.opentelemetry.context.Scope scope = span.makeCurrent()) {
      return span.sent(sendTraced(span.request()));
    } catch (RuntimeException | Error e) {
      span.failed(e);
      throw e;
    }
  }

  private dev.taskbroker.v1.SubmitResponse sendTraced(dev.taskbroker.v1.SubmitRequest req) {
    for (int retries = 0; ; retries++) {
      try {
        return broker().withDeadlineAfter(10, TimeUnit.SECONDS).submit(req);
      } catch (io.grpc.StatusRuntimeException e) {
        java.util.Optional<java.time.Duration> delay = ErrorDetails.submitRetryDelay(e, retries);
        if (delay.isEmpty()) {
          throw e;
        }
        LOG.log(
            System.Logger.Level.INFO,
            "taskbroker: submit refused ("
                + e.getStatus().getCode()
                + ": "
                + ErrorDetails.oneLine(e.getStatus().getDescription())
                + "); sending it again in "
                + delay.get().toMillis()
                + " ms (retry "
                + (retries + 1)
                + " of "
                + ErrorDetails.SUBMIT_RETRIES
                + ")");
        try {
          Thread.sleep(delay.get().toMillis());
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          throw e;
        }
      }
    }
  }

  /**
   * Submits several tasks in one request (all or none) with a 10 s deadline; the results in
   * order. A task's {@code depends_on_index} names earlier tasks of the same list:
   *
   * <pre>{@code
   * List<SubmitResult> r = tb.submitAll(List.of(
   *     TaskSpec.newBuilder().setQueue("etl").build(),
   *     TaskSpec.newBuilder().setQueue("etl").addDependsOnIndex(0).build()));
   * }</pre>
   */
  public java.util.List<dev.taskbroker.v1.SubmitResult> submitAll(
      java.util.List<dev.taskbroker.v1.TaskSpec> specs) {
    var req = dev.taskbroker.v1.SubmitRequest.newBuilder();
    for (dev.taskbroker.v1.TaskSpec spec : specs) {
      req.addTasks(Tracing.inject(spec.toBuilder()));
    }
    return send(req.build()).getResultsList();
  }

  /**
   * Blocks until the task is SUCCEEDED and returns it (state, result), following it on
   * AdminService.WatchTasks rather than polling (Flow). A task that ends DEAD or CANCELLED
   * throws {@link TaskFailedException} (its id, state and last error). Throws {@link
   * WaitTimeoutException} after {@code timeout} (null: no limit); the task carries on. Declares no
   * checked exception: an interrupt of the waiting thread throws {@link WaitInterruptedException}
   * with the thread's interrupt flag set again.
   */
  public dev.taskbroker.v1.Task waitFor(String taskId, java.time.Duration timeout) {
    return TaskFailedException.throwIfFailed(waitForAll(java.util.List.of(taskId), timeout).get(0));
  }

  /**
   * Waits for up to 1000 tasks on one stream; the tasks in the order given, whatever their final
   * state (read each one's state; no {@link TaskFailedException}). {@link WaitTimeoutException}
   * and {@link WaitInterruptedException} as {@link #waitFor} says.
   */
  public java.util.List<dev.taskbroker.v1.Task> waitForAll(
      java.util.List<String> taskIds, java.time.Duration timeout) {
    try {
      return TaskWaiter.waitAll(channel, taskIds, timeout);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new WaitInterruptedException(taskIds, e);
    }
  }

  /**
   * {@link #submit} then {@link #waitFor} up to {@code timeout} ({@link TaskFailedException} for a
   * task that ends DEAD or CANCELLED, {@link WaitInterruptedException} on an interrupt: the task
   * stays submitted).
   */
  public dev.taskbroker.v1.Task submitAndWait(
      dev.taskbroker.v1.TaskSpec spec, java.time.Duration timeout) {
    return waitFor(submit(spec).getTaskId(), timeout);
  }

  /** One task as the broker has it now: its state by name, times as Instants. */
  public TaskInfo getTask(String taskId) {
    return TaskInfo.of(
        admin().getTask(dev.taskbroker.v1.GetTaskRequest.newBuilder().setTaskId(taskId).build()).getTask());
  }

  /**
   * Every task matching {@code filter}, newest first, read a page at a time as the stream is
   * consumed ({@code limit}, {@code findFirst} stop reading).
   */
  public java.util.stream.Stream<TaskInfo> listTasks(TaskFilter filter) {
    AdminServiceGrpc.AdminServiceBlockingStub stub = admin();
    dev.taskbroker.v1.ListTasksRequest.Builder req = filter.request();
    java.util.Iterator<TaskInfo> pages =
        new java.util.Iterator<>() {
          private java.util.Iterator<dev.taskbroker.v1.Task> page = java.util.Collections.emptyIterator();
          private boolean last;

          @Override
          public boolean hasNext() {
            while (!page.hasNext() && !last) {
              dev.taskbroker.v1.ListTasksResponse r = stub.listTasks(req.build());
              page = r.getTasksList().iterator();
              last = r.getNextPageToken().isEmpty();
              req.setPageToken(r.getNextPageToken());
            }
            return page.hasNext();
          }

          @Override
          public TaskInfo next() {
            if (!hasNext()) {
              throw new java.util.NoSuchElementException();
            }
            return TaskInfo.of(page.next());
          }
        };
    return java.util.stream.StreamSupport.stream(
        java.util.Spliterators.spliteratorUnknownSize(pages, java.util.Spliterator.ORDERED), false);
  }

  /**
   * SCHEDULED, READY or BLOCKED: CANCELLED at once. LEASED: {@code cancelRequested}, and its
   * worker is told on its next heartbeat.
   */
  public TaskInfo cancelTask(String taskId) {
    return TaskInfo.of(
        admin().cancelTask(dev.taskbroker.v1.CancelTaskRequest.newBuilder().setTaskId(taskId).build()).getTask());
  }

  /** DEAD or CANCELLED: READY again, with a fresh budget of attempts. */
  public TaskInfo requeueTask(String taskId) {
    return TaskInfo.of(
        admin().requeueTask(dev.taskbroker.v1.RequeueTaskRequest.newBuilder().setTaskId(taskId).build()).getTask());
  }

  /** Which gates hold a task that is not running. */
  public TaskExplanation explainTask(String taskId) {
    return TaskExplanation.of(
        admin().explainTask(dev.taskbroker.v1.ExplainTaskRequest.newBuilder().setTaskId(taskId).build()));
  }

  /** A limit bucket's settings, use now and cooldown; NOT_FOUND when it is not defined. */
  public BucketInfo getBucket(String name) {
    return Buckets.get(admin(), name);
  }

  /** Every defined bucket, by name. */
  public java.util.List<BucketInfo> listBuckets() {
    return Buckets.list(admin());
  }

  /** Changes the fields {@code update} sets, defining the bucket if need be; the bucket as it is now. */
  public BucketInfo updateBucket(BucketUpdate update) {
    return Buckets.update(admin(), update);
  }

  /** Removes a bucket (its tasks lease without its limits); NOT_FOUND when it is not defined. */
  public void deleteBucket(String name) {
    Buckets.delete(admin(), name);
  }

  /** The live cooldowns, soonest end first; of one queue's keys or one bucket when not null. */
  public java.util.List<CooldownInfo> listCooldowns(String queue, String bucket) {
    return Buckets.cooldowns(admin(), queue, bucket);
  }

  /** Ends the cooldown of {@code queue}'s concurrency key {@code key} now; false when there was none. */
  public boolean liftCooldown(String queue, String key) {
    return Buckets.lift(admin(), dev.taskbroker.v1.LiftCooldownRequest.newBuilder().setQueue(queue).setConcurrencyKey(key).build());
  }

  /** Ends the cooldown of {@code bucket} now; false when there was none. */
  public boolean liftBucketCooldown(String bucket) {
    return Buckets.lift(admin(), dev.taskbroker.v1.LiftCooldownRequest.newBuilder().setBucket(bucket).build());
  }

  /** A blocking AdminService stub. */
  public AdminServiceGrpc.AdminServiceBlockingStub admin() {
    return AdminServiceGrpc.newBlockingStub(channel);
  }

  /** A blocking ScheduleService stub (cron, interval and one-off schedules). */
  public dev.taskbroker.v1.ScheduleServiceGrpc.ScheduleServiceBlockingStub schedules() {
    return dev.taskbroker.v1.ScheduleServiceGrpc.newBlockingStub(channel);
  }

  @Override
  public void close() {
    channel.shutdown();
    try {
      if (!channel.awaitTermination(5, TimeUnit.SECONDS)) {
        channel.shutdownNow();
      }
    } catch (InterruptedException e) {
      channel.shutdownNow();
      Thread.currentThread().interrupt();
    }
  }
}
