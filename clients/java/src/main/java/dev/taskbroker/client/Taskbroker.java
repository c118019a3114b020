package dev.taskbroker.client;

import dev.taskbroker.v1.AdminServiceGrpc;
import dev.taskbroker.v1.BrokerServiceGrpc;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import java.util.concurrent.TimeUnit;

/**
 * A connection to one broker: a plaintext gRPC channel and blocking stubs for BrokerService and
 * AdminService. Close it when done.
 */
public final class Taskbroker implements AutoCloseable {
  private final ManagedChannel channel;

  private Taskbroker(ManagedChannel channel) {
    this.channel = channel;
  }

  /** Connects to {@code host:port} over plaintext HTTP/2. */
  public static Taskbroker connect(String address) {
    ManagedChannel channel =
        ManagedChannelBuilder.forTarget(address)
            .usePlaintext()
            // Leases are long-polled for up to a minute: keep idle connections alive past that.
            .keepAliveTime(30, TimeUnit.SECONDS)
            .build();
    return new Taskbroker(channel);
  }

  /** Wraps a channel built by the caller (TLS, interceptors); closing this closes it too. */
  public static Taskbroker of(ManagedChannel channel) {
    return new Taskbroker(channel);
  }

  public ManagedChannel channel() {
    return channel;
  }

  /** A blocking BrokerService stub; set a deadline per call with {@code withDeadlineAfter}. */
  public BrokerServiceGrpc.BrokerServiceBlockingStub broker() {
    return BrokerServiceGrpc.newBlockingStub(channel);
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
