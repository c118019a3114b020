package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * failFast against a real plaintext gRPC server on loopback reached over TLS: the handshake can
 * never succeed, so with the option the worker stops at its first Lease; without it, it retries.
 */
class FailFastTest {
  private FakeBroker fake;
  private Server server;
  private Taskbroker tls;

  @BeforeEach
  void setUp() throws Exception {
    fake = new FakeBroker();
    server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(fake).build().start();
    tls = Taskbroker.builder("127.0.0.1:" + server.getPort()).tls().build();
  }

  @AfterEach
  void tearDown() throws Exception {
    tls.close();
    server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    fake.close();
  }

  private Worker.Builder worker(List<Throwable> errors) {
    return Worker.builder(tls)
        .handle("q", task -> null)
        .workerId("w1")
        .pollWait(Duration.ofSeconds(1))
        .onError((during, e) -> errors.add(e));
  }

  @Test
  void withFailFastATlsHandshakeThatCannotSucceedStopsTheWorkerWithOnePlainLine() {
    List<Throwable> errors = new CopyOnWriteArrayList<>();
    Worker w = worker(errors).failFast(true).build();
    WorkerStoppedException e =
        assertTimeoutPreemptively(Duration.ofSeconds(20), () -> assertThrows(WorkerStoppedException.class, w::run));
    assertTrue(e.getMessage().startsWith("cannot use the broker as configured (failFast): the TLS handshake failed (UNAVAILABLE"), e.getMessage());
    assertFalse(e.getMessage().contains("\n"), e.getMessage());
    assertTrue(errors.isEmpty(), "retried first: " + errors);
  }

  @Test
  void withoutFailFastTheSameErrorIsRetried() throws Exception {
    List<Throwable> errors = new CopyOnWriteArrayList<>();
    Worker w = worker(errors).build();
    w.start();
    try {
      long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
      while (errors.size() < 2) {
        assertTrue(System.nanoTime() < end, "fewer than 2 lease errors in 20 s");
        Thread.sleep(20);
      }
      assertTrue(ErrorDetails.isConfigurationError(errors.get(0)), "not a configuration error: " + errors.get(0));
      assertTrue(w.failure().isEmpty());
      assertTrue(w.isRunning());
    } finally {
      w.stop(Duration.ofSeconds(5));
    }
  }
}
