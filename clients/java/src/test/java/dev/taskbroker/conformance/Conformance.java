package dev.taskbroker.conformance;

import static dev.taskbroker.client.ProtoTime.duration;
import static dev.taskbroker.client.ProtoTime.timestamp;

import com.google.protobuf.ByteString;
import com.google.rpc.ErrorInfo;
import dev.taskbroker.client.ErrorDetails;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.AdminServiceGrpc.AdminServiceBlockingStub;
import dev.taskbroker.v1.BrokerServiceGrpc.BrokerServiceBlockingStub;
import dev.taskbroker.v1.CancelTaskRequest;
import dev.taskbroker.v1.CheckpointRequest;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.CreateScheduleRequest;
import dev.taskbroker.v1.DeleteScheduleRequest;
import dev.taskbroker.v1.GetScheduleRequest;
import dev.taskbroker.v1.OverlapPolicy;
import dev.taskbroker.v1.Schedule;
import dev.taskbroker.v1.ScheduleSpec;
import dev.taskbroker.v1.ScheduleState;
import dev.taskbroker.v1.TaskTemplate;
import dev.taskbroker.v1.FailRequest;
import dev.taskbroker.v1.FailResponse;
import dev.taskbroker.v1.GetTaskRequest;
import dev.taskbroker.v1.HeartbeatRequest;
import dev.taskbroker.v1.HeartbeatResponse;
import dev.taskbroker.v1.LeaseRef;
import dev.taskbroker.v1.LeaseRequest;
import dev.taskbroker.v1.LeaseResponse;
import dev.taskbroker.v1.LeaseStatus;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.RetryPolicy;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResponse;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.Task;
import dev.taskbroker.v1.TaskSpec;
import dev.taskbroker.v1.TaskState;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.time.Instant;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

/**
 * The client conformance scenario (clients/conformance/SCENARIO.md) in Java: the cases of
 * clients/conformance/cases.txt, each loaded from its folder's Case.java (see {@link ConformanceCase}).
 *
 * <p>Talks to the broker at $TASKBROKER_ADDR through the generated stubs only, prints {@code PASS
 * <case>} / {@code FAIL <case>: <reason>} per case and {@code N passed, M failed} last; exits 1
 * when any case failed.
 */
public final class Conformance {
  private static final String LANG = "java";
  private static final SecureRandom RANDOM = new SecureRandom();

  private final Taskbroker tb;
  /** A fresh queue per case: conf.java.<case>.<random>. */
  private String queue;

  private Conformance(Taskbroker tb) {
    this.tb = tb;
  }

  @FunctionalInterface
  private interface Case {
    void run() throws Exception;
  }

  /** A case's expectation did not hold. */
  static final class Mismatch extends Exception {
    private static final long serialVersionUID = 1L;

    Mismatch(String message) {
      super(message);
    }
  }

  public static void main(String[] args) {
    String addr = System.getenv("TASKBROKER_ADDR");
    if (addr == null || addr.isEmpty()) {
      System.err.println("TASKBROKER_ADDR (host:port) is not set");
      System.exit(2);
    }
    int failed;
    try (Taskbroker tb = Taskbroker.fromEnv(addr)) {
      failed = new Conformance(tb).runAll();
    }
    System.exit(failed > 0 ? 1 : 0);
  }

  private int runAll() {
    Map<String, Case> cases = new LinkedHashMap<>();
    for (String name : caseNames()) {
      cases.put(name, () -> load(name).run(tb, queue));
    }
    int passed = 0;
    int failed = 0;
    for (Map.Entry<String, Case> c : cases.entrySet()) {
      byte[] suffix = new byte[3];
      RANDOM.nextBytes(suffix);
      queue = "conf." + LANG + "." + c.getKey() + "." + HexFormat.of().formatHex(suffix);
      try {
        c.getValue().run();
        System.out.println("PASS " + c.getKey());
        passed++;
      } catch (Exception e) {
        System.out.println("FAIL " + c.getKey() + ": " + reasonOf(e).replaceAll("\\s+", " "));
        failed++;
      }
    }
    System.out.println(passed + " passed, " + failed + " failed");
    return failed;
  }

  /** The cases of clients/conformance/cases.txt (from clients/java, where the scenario runs), in order. */
  private static List<String> caseNames() {
    try {
      return Files.readAllLines(Path.of("../conformance/cases.txt")).stream()
          .map(String::strip)
          .filter(l -> !l.isEmpty())
          .toList();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The case {@code name}: the class {@code <Name>Case} of its folder's Case.java. */
  private static ConformanceCase load(String name) throws ReflectiveOperationException {
    StringBuilder cls = new StringBuilder(Conformance.class.getPackageName()).append('.');
    for (String part : name.split("_")) {
      cls.append(Character.toUpperCase(part.charAt(0))).append(part.substring(1));
    }
    cls.append("Case");
    return (ConformanceCase) Class.forName(cls.toString()).getDeclaredConstructor().newInstance();
  }

  private static String reasonOf(Exception e) {
    if (e instanceof Mismatch) {
      return e.getMessage();
    }
    if (e instanceof StatusRuntimeException sre) {
      Status s = sre.getStatus();
      String cause = s.getCause() != null ? " (" + s.getCause() + ")" : "";
      return "rpc error " + s.getCode() + ": " + s.getDescription() + cause;
    }
    return e.toString();
  }

}
