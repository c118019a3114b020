package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Timestamp;
import dev.taskbroker.v1.BrokerServiceGrpc;
import dev.taskbroker.v1.SubmitRequest;
import dev.taskbroker.v1.SubmitResponse;
import dev.taskbroker.v1.SubmitResult;
import io.grpc.Server;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;

/** A relative delay becomes the TaskSpec's run_at: the client's clock plus the delay. */
class DelayTest {
  @Test
  void fromNowIsTheClocksInstantPlusTheDelay() {
    Clock clock = Clock.fixed(Instant.parse("2030-01-02T03:04:05.123456789Z"), ZoneOffset.UTC);
    Timestamp t = ProtoTime.fromNow(Duration.ofMinutes(90), clock);
    assertEquals(Instant.parse("2030-01-02T04:34:05.123456789Z"), ProtoTime.instant(t));
    assertEquals(
        Instant.parse("2030-01-02T03:04:05.123456789Z"),
        ProtoTime.instant(ProtoTime.fromNow(Duration.ZERO, clock)));
  }

  /** Records each SubmitRequest and answers one result per task. */
  static final class Recorder extends BrokerServiceGrpc.BrokerServiceImplBase {
    final List<SubmitRequest> got = new CopyOnWriteArrayList<>();

    @Override
    public void submit(SubmitRequest req, StreamObserver<SubmitResponse> out) {
      got.add(req);
      var resp = SubmitResponse.newBuilder();
      req.getTasksList().forEach(t -> resp.addResults(SubmitResult.newBuilder().setTaskId("t")));
      out.onNext(resp.build());
      out.onCompleted();
    }
  }

  @Test
  void submitWithADelaySendsRunAtNowPlusTheDelay() throws Exception {
    Recorder rec = new Recorder();
    String name = InProcessServerBuilder.generateName();
    Server server = InProcessServerBuilder.forName(name).addService(rec).build().start();
    try (Taskbroker tb = Taskbroker.of(InProcessChannelBuilder.forName(name).build())) {
      Duration delay = Duration.ofMinutes(90);
      Instant before = Instant.now();
      tb.submit("emails", "hi", delay);
      Instant after = Instant.now();
      var spec = rec.got.get(0).getTasks(0);
      Instant runAt = ProtoTime.instant(spec.getRunAt());
      assertTrue(
          !runAt.isBefore(before.plus(delay)) && !runAt.isAfter(after.plus(delay)),
          "run_at " + runAt + " not within [" + before.plus(delay) + ", " + after.plus(delay) + "]");
      assertEquals("emails", spec.getQueue());
      assertEquals("\"hi\"", spec.getPayload().toStringUtf8());

      Instant at = Instant.parse("2031-05-06T07:08:09Z");
      tb.submit(tb.spec("emails", "hi").setRunAt(ProtoTime.timestamp(at)).build());
      assertEquals(at, ProtoTime.instant(rec.got.get(1).getTasks(0).getRunAt()));
    } finally {
      server.shutdownNow();
    }
  }
}
