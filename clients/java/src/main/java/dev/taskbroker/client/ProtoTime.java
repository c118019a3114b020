package dev.taskbroker.client;

import com.google.protobuf.Duration;
import com.google.protobuf.Timestamp;
import java.time.Instant;

/** Conversions between java.time and the protobuf well-known time types. */
public final class ProtoTime {
  private ProtoTime() {}

  public static Duration duration(java.time.Duration d) {
    return Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
  }

  public static Timestamp timestamp(Instant t) {
    return Timestamp.newBuilder().setSeconds(t.getEpochSecond()).setNanos(t.getNano()).build();
  }

  public static Instant instant(Timestamp t) {
    return Instant.ofEpochSecond(t.getSeconds(), t.getNanos());
  }
}
