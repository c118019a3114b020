/*
 * The conformance case keys_and_replace, for the Java client: README.md beside this file says what
 * it does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import com.google.protobuf.ByteString;
import dev.taskbroker.client.ProtoTime;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.DuplicateKeyPolicy;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.SubmitResult;
import dev.taskbroker.v1.TaskKey;
import dev.taskbroker.v1.TaskState;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import static dev.taskbroker.conformance.ResultsCases.*;

final class KeysAndReplaceCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    keysAndReplace(tb, queue);
  }

  static void keysAndReplace(Taskbroker tb, String queue) throws Exception {
    String b =
        tb.submit(
                tb.spec(queue, utf8("b"))
                    .addDependsOnKeys(TaskKey.newBuilder().setQueue(queue).setKey("k-a"))
                    .build())
            .getTaskId();
    TaskState blocked = state(tb, b);
    check(blocked == TaskState.TASK_STATE_BLOCKED, "b is " + blocked + " before k-a exists, want BLOCKED");

    Instant now = Instant.now();
    SubmitResult d1 =
        tb.submit(
            tb.spec(queue, utf8("v1"))
                .setKey("digest")
                .setRunAt(ProtoTime.timestamp(now.plus(Duration.ofHours(1))))
                .build());
    SubmitResult d2 =
        tb.submit(
            tb.spec(queue, utf8("v2"))
                .setKey("digest")
                .setRunAt(ProtoTime.timestamp(now))
                .setOnDuplicateKey(DuplicateKeyPolicy.DUPLICATE_KEY_POLICY_REPLACE_WAITING)
                .build());
    check(
        d2.getTaskId().equals(d1.getTaskId()) && d2.getDeduplicated() && d2.getReplaced(),
        "the second submit of digest answered " + d2.getTaskId() + " deduplicated=" + d2.getDeduplicated()
            + " replaced=" + d2.getReplaced() + ", want " + d1.getTaskId() + " deduplicated=true replaced=true");

    String a = tb.submit(tb.spec(queue, utf8("a")).setKey("k-a").build()).getTaskId();
    List<LeasedTask> first = lease(tb, queue, Duration.ZERO);
    Map<String, String> got = new TreeMap<>();
    first.forEach(t -> got.put(t.getTaskId(), t.getPayload().toStringUtf8()));
    Map<String, String> want = new TreeMap<>(Map.of(a, "a", d1.getTaskId(), "v2"));
    check(
        first.size() == 2 && got.equals(want),
        "the first Lease returned " + got + ", want " + want + " (a, and d with payload v2)");
    for (LeasedTask t : first) {
      CompleteRequest.Builder done =
          CompleteRequest.newBuilder().setTaskId(t.getTaskId()).setLeaseToken(t.getLeaseToken());
      if (t.getTaskId().equals(a)) {
        done.setResult(ByteString.copyFromUtf8("a-result"));
      }
      tb.broker().complete(done.build());
    }
    TaskState ready = state(tb, b);
    check(ready == TaskState.TASK_STATE_READY, "b is " + ready + " after a's Complete, want READY");

    List<LeasedTask> second = lease(tb, queue, Duration.ofSeconds(5));
    check(
        second.size() == 1 && second.get(0).getTaskId().equals(b),
        "the second Lease returned " + second.stream().map(t -> t.getPayload().toStringUtf8()).toList() + ", want exactly b");
    LeasedTask leasedB = second.get(0);
    Map<String, String> results = new TreeMap<>();
    leasedB.getDependencyResultsMap().forEach((id, r) -> results.put(id, r.toStringUtf8()));
    check(
        results.equals(Map.of(a, "a-result")),
        "b's dependency_results " + results + ", want {" + a + "=a-result}");
    tb.broker()
        .complete(
            CompleteRequest.newBuilder().setTaskId(leasedB.getTaskId()).setLeaseToken(leasedB.getLeaseToken()).build());
  }
}
