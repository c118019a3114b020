/*
 * The conformance case schedule_every, for the Java client: README.md beside this file says what
 * it does and expects. Compiled from a test source root of clients/java (pom.xml); the harness
 * (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.v1.CompleteRequest;
import dev.taskbroker.v1.CreateScheduleRequest;
import dev.taskbroker.v1.DeleteScheduleRequest;
import dev.taskbroker.v1.GetScheduleRequest;
import dev.taskbroker.v1.LeasedTask;
import dev.taskbroker.v1.OverlapPolicy;
import dev.taskbroker.v1.Schedule;
import dev.taskbroker.v1.ScheduleSpec;
import dev.taskbroker.v1.ScheduleState;
import dev.taskbroker.v1.TaskTemplate;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import static dev.taskbroker.client.ProtoTime.duration;

import dev.taskbroker.conformance.Conformance.Mismatch;

final class ScheduleEveryCase extends StubCase {
  @Override
  void run() throws Exception {
    scheduleEvery();
  }

  private void scheduleEvery() throws Mismatch {
    var schedules = tb.schedules().withDeadlineAfter(10, TimeUnit.SECONDS);
    String id = queue;
    Schedule created =
        schedules
            .createSchedule(
                CreateScheduleRequest.newBuilder()
                    .setSchedule(
                        Schedule.newBuilder()
                            .setScheduleId(id)
                            .setSpec(ScheduleSpec.newBuilder().setEvery(duration(Duration.ofSeconds(1))))
                            .setTask(TaskTemplate.newBuilder().setQueue(queue).setPayload(bytes("tick")))
                            .setOverlap(OverlapPolicy.OVERLAP_POLICY_ALLOW))
                    .build())
            .getSchedule();
    check(created.getState() == ScheduleState.SCHEDULE_STATE_ACTIVE, "state " + created.getState() + ", want ACTIVE");
    for (int i = 0; i < 2; i++) {
      LeasedTask t = leaseOne(Duration.ofSeconds(30), Duration.ofSeconds(10));
      check(t.getPayload().equals(bytes("tick")), "payload " + t.getPayload().toStringUtf8() + ", want tick");
      check(
          id.equals(t.getMetadataMap().get("taskbroker.schedule_id")),
          "metadata " + t.getMetadataMap() + " lacks taskbroker.schedule_id");
      broker().complete(CompleteRequest.newBuilder().setTaskId(t.getTaskId()).setLeaseToken(t.getLeaseToken()).build());
    }
    Schedule got = schedules.getSchedule(GetScheduleRequest.newBuilder().setScheduleId(id).build()).getSchedule();
    check(got.getRuns() >= 2, "runs " + got.getRuns() + ", want >= 2");
    schedules.deleteSchedule(DeleteScheduleRequest.newBuilder().setScheduleId(id).build());
    StatusRuntimeException err = null;
    try {
      schedules.getSchedule(GetScheduleRequest.newBuilder().setScheduleId(id).build());
    } catch (StatusRuntimeException e) {
      err = e;
    }
    check(err != null, "GetSchedule after delete succeeded");
    check(err.getStatus().getCode() == Status.Code.NOT_FOUND, "after delete: " + err.getStatus().getCode() + ", want NOT_FOUND");
  }
}
