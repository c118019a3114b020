package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.rpc.Code;
import com.google.rpc.RetryInfo;
import dev.taskbroker.v1.LeasedTask;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.Optional;
import org.junit.jupiter.api.Test;

/** The submit rule for backpressure and the typed reader of a dependency's result. */
class SubmitFieldsTest {
  private static StatusRuntimeException refusal(Code code, Duration delay) {
    var status = com.google.rpc.Status.newBuilder().setCode(code.getNumber()).setMessage("queue q is full");
    if (delay != null) {
      status.addDetails(
          Any.pack(RetryInfo.newBuilder().setRetryDelay(ProtoTime.duration(delay)).build()));
    }
    return StatusProto.toStatusRuntimeException(status.build());
  }

  @Test
  void submitRetryDelayFollowsRetryInfoWithinItsBounds() {
    assertEquals(
        Optional.of(Duration.ofMillis(1500)),
        ErrorDetails.submitRetryDelay(refusal(Code.RESOURCE_EXHAUSTED, Duration.ofMillis(1500)), 0));
    assertEquals(
        Optional.of(ErrorDetails.SUBMIT_RETRY_MAX_DELAY),
        ErrorDetails.submitRetryDelay(refusal(Code.RESOURCE_EXHAUSTED, Duration.ofMinutes(1)), 2));
    assertTrue(
        ErrorDetails.submitRetryDelay(
                refusal(Code.RESOURCE_EXHAUSTED, Duration.ofSeconds(1)), ErrorDetails.SUBMIT_RETRIES)
            .isEmpty());
    assertTrue(ErrorDetails.submitRetryDelay(refusal(Code.RESOURCE_EXHAUSTED, null), 0).isEmpty());
    assertTrue(ErrorDetails.submitRetryDelay(refusal(Code.UNAVAILABLE, Duration.ofSeconds(1)), 0).isEmpty());
    assertTrue(ErrorDetails.submitRetryDelay(Status.RESOURCE_EXHAUSTED.asRuntimeException(), 0).isEmpty());
  }

  record Total(int n) {}

  @Test
  void dependencyResultDecodesWithTheSerializer() {
    LeasedTask task =
        LeasedTask.newBuilder()
            .setTaskId("b")
            .putDependencyResults("a", ByteString.copyFromUtf8("{\"n\":7}"))
            .putDependencyResults("raw", ByteString.copyFromUtf8("not json"))
            .build();
    TaskContext ctx = new TaskContext(null, task, Duration.ofSeconds(30), new JsonSerializer());
    assertEquals(new Total(7), ctx.dependencyResult("a", Total.class));
    assertArrayEquals("not json".getBytes(), ctx.dependencyResult("raw", byte[].class));
    assertEquals(2, ctx.dependencyResults().size());
    var bad = assertThrows(SerializationException.class, () -> ctx.dependencyResult("raw", Total.class));
    assertTrue(bad.getMessage().contains("dependency raw"), bad.getMessage());
    var missing = assertThrows(SerializationException.class, () -> ctx.dependencyResult("missing", Total.class));
    assertTrue(missing.getMessage().contains("missing"), missing.getMessage());
  }
}
