/*
 * The conformance case heartbeat_extends, for the Java client: README.md beside this file says
 * what it does and expects. Compiled from a test source root of clients/java (pom.xml); the
 * harness (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.v1.HeartbeatRequest;
import dev.taskbroker.v1.HeartbeatResponse;
import dev.taskbroker.v1.LeaseRef;
import dev.taskbroker.v1.LeaseStatus;
import dev.taskbroker.v1.LeasedTask;
import java.time.Duration;
import static dev.taskbroker.client.ProtoTime.duration;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class HeartbeatExtendsCase extends StubCase {
  @Override
  void run() throws Exception {
    heartbeatExtends();
  }

  private void heartbeatExtends() throws Mismatch {
    String taskId = submitOne(spec());
    LeasedTask t = leaseOne(Duration.ofSeconds(5));
    check(t.getTaskId().equals(taskId), "leased " + t.getTaskId() + ", want " + taskId);
    HeartbeatResponse hb =
        broker()
            .heartbeat(
                HeartbeatRequest.newBuilder()
                    .setWorkerId(WORKER_ID)
                    .addLeases(LeaseRef.newBuilder().setTaskId(taskId).setLeaseToken(t.getLeaseToken()))
                    .setExtendBy(duration(Duration.ofSeconds(60)))
                    .build());
    check(hb.getLeasesCount() == 1, "Heartbeat returned " + hb.getLeasesCount() + " statuses, want 1");
    LeaseStatus st = hb.getLeases(0);
    check(!st.getLost(), "Heartbeat reported lost=true for a live lease");
    check(t.hasLeaseExpiresAt() && st.hasLeaseExpiresAt(), "lease_expires_at unset");
    long moved = millis(st.getLeaseExpiresAt()) - millis(t.getLeaseExpiresAt());
    check(moved >= 30_000, "lease_expires_at moved by " + moved + " ms, want >= 30000");
    HeartbeatResponse stale =
        broker()
            .heartbeat(
                HeartbeatRequest.newBuilder()
                    .setWorkerId(WORKER_ID)
                    .addLeases(LeaseRef.newBuilder().setTaskId(taskId).setLeaseToken("stale"))
                    .build());
    check(stale.getLeasesCount() == 1, "stale Heartbeat returned " + stale.getLeasesCount() + " statuses, want 1");
    check(stale.getLeases(0).getLost(), "stale Heartbeat answered lost=false, want true");
  }
}
