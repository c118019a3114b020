package dev.taskbroker.spring;

import com.google.protobuf.CodedInputStream;
import com.google.protobuf.CodedOutputStream;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import io.grpc.CallOptions;
import io.grpc.MethodDescriptor;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCalls;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthIndicator;

/**
 * The actuator's {@code taskbroker} health: whether the broker answers its gRPC readiness check
 * ({@code grpc.health.v1.Health/Check}, service {@code readiness}: the broker is up and reaches
 * its database) and the state of each worker. DOWN when the broker does not answer SERVING
 * within the timeout, or when a worker has stopped on its own (the broker refused it, or
 * fail-fast) while the application runs; UP otherwise. Details: {@code broker} ({@code SERVING},
 * the status the check answered, or the error) and {@code workers} (per worker: {@code workerId},
 * {@code queues}, {@code running}, {@code inFlight}, and {@code failure} when it stopped on its
 * own). In the in-memory mode the broker is {@code in-memory} and not checked.
 */
public class TaskbrokerHealthIndicator implements HealthIndicator {
  /** The broker's readiness service in grpc.health.v1 (service "" is liveness). */
  static final String READINESS = "readiness";

  private static final MethodDescriptor.Marshaller<byte[]> BYTES =
      new MethodDescriptor.Marshaller<>() {
        @Override
        public InputStream stream(byte[] value) {
          return new ByteArrayInputStream(value);
        }

        @Override
        public byte[] parse(InputStream stream) {
          try {
            return stream.readAllBytes();
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        }
      };

  private static final MethodDescriptor<byte[], byte[]> CHECK =
      MethodDescriptor.<byte[], byte[]>newBuilder()
          .setType(MethodDescriptor.MethodType.UNARY)
          .setFullMethodName("grpc.health.v1.Health/Check")
          .setRequestMarshaller(BYTES)
          .setResponseMarshaller(BYTES)
          .build();

  private final Taskbroker taskbroker;
  private final TaskbrokerWorkers workers;
  private final boolean inMemory;
  private final Duration timeout;

  public TaskbrokerHealthIndicator(Taskbroker taskbroker, TaskbrokerWorkers workers, boolean inMemory, Duration timeout) {
    this.taskbroker = taskbroker;
    this.workers = workers;
    this.inMemory = inMemory;
    this.timeout = timeout;
  }

  @Override
  public Health health() {
    boolean up = true;
    Health.Builder b = new Health.Builder();
    if (inMemory) {
      b.withDetail("broker", "in-memory");
    } else {
      String broker = check();
      up = broker.equals("SERVING");
      b.withDetail("broker", broker);
    }
    Map<String, Object> ws = new LinkedHashMap<>();
    if (workers != null) {
      for (Map.Entry<String, Worker> e : workers.workers().entrySet()) {
        Worker w = e.getValue();
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("workerId", w.workerId());
        d.put("queues", w.queues());
        d.put("running", w.isRunning());
        d.put("inFlight", w.inFlight());
        w.failure().ifPresent(f -> d.put("failure", f.getMessage()));
        if (workers.isRunning() && !w.isRunning()) {
          up = false;
        }
        ws.put(e.getKey(), d);
      }
    }
    b.withDetail("workers", ws);
    return (up ? b.up() : b.down()).build();
  }

  /** SERVING, the other status the broker answered, or the call's error in one line. */
  private String check() {
    try {
      byte[] reply =
          ClientCalls.blockingUnaryCall(
              taskbroker.channel(),
              CHECK,
              CallOptions.DEFAULT.withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS),
              request(READINESS));
      return status(reply);
    } catch (StatusRuntimeException e) {
      String d = e.getStatus().getDescription();
      return e.getStatus().getCode() + (d == null ? "" : ": " + d.lines().findFirst().orElse(""));
    }
  }

  /** A HealthCheckRequest: field 1, the service name. */
  static byte[] request(String service) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try {
      CodedOutputStream c = CodedOutputStream.newInstance(out);
      c.writeString(1, service);
      c.flush();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return out.toByteArray();
  }

  /** The ServingStatus (field 1) of a HealthCheckResponse, by name. */
  static String status(byte[] reply) {
    int status = 0;
    try {
      CodedInputStream in = CodedInputStream.newInstance(reply);
      for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
        if (tag == (1 << 3)) {
          status = in.readEnum();
        } else {
          in.skipField(tag);
        }
      }
    } catch (IOException e) {
      return "a health reply that does not decode";
    }
    return switch (status) {
      case 1 -> "SERVING";
      case 2 -> "NOT_SERVING";
      case 3 -> "SERVICE_UNKNOWN";
      default -> "UNKNOWN";
    };
  }
}
