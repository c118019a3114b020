package dev.taskbroker.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.util.Optional;

/** Reads the rich error details ({@code grpc-status-details-bin}) the broker attaches to errors. */
public final class ErrorDetails {
  /** The ErrorInfo domain of every error the broker raises. */
  public static final String DOMAIN = "taskbroker.dev";

  /** The ErrorInfo reason when a lease token no longer holds its task. */
  public static final String LEASE_LOST = "LEASE_LOST";

  private ErrorDetails() {}

  /** The first google.rpc.ErrorInfo detail of a failed call, if any. */
  public static Optional<ErrorInfo> errorInfo(Throwable t) {
    com.google.rpc.Status status = StatusProto.fromThrowable(t);
    if (status == null) {
      return Optional.empty();
    }
    for (Any detail : status.getDetailsList()) {
      if (detail.is(ErrorInfo.class)) {
        try {
          return Optional.of(detail.unpack(ErrorInfo.class));
        } catch (InvalidProtocolBufferException e) {
          return Optional.empty();
        }
      }
    }
    return Optional.empty();
  }

  /** The delay of the google.rpc.RetryInfo detail of a failed call, if any. */
  public static Optional<java.time.Duration> retryDelay(Throwable t) {
    com.google.rpc.Status status = StatusProto.fromThrowable(t);
    if (status == null) {
      return Optional.empty();
    }
    for (Any detail : status.getDetailsList()) {
      if (detail.is(com.google.rpc.RetryInfo.class)) {
        try {
          com.google.protobuf.Duration d =
              detail.unpack(com.google.rpc.RetryInfo.class).getRetryDelay();
          return Optional.of(java.time.Duration.ofSeconds(d.getSeconds(), d.getNanos()));
        } catch (InvalidProtocolBufferException e) {
          return Optional.empty();
        }
      }
    }
    return Optional.empty();
  }

  /**
   * A Submit refused with RESOURCE_EXHAUSTED and a RetryInfo is sent again at most this often (5
   * tries in all; docs/client-spec.md, point 18).
   */
  public static final int SUBMIT_RETRIES = 4;

  /** The longest wait before one such resend (a longer hint is cut to this). */
  public static final java.time.Duration SUBMIT_RETRY_MAX_DELAY = java.time.Duration.ofSeconds(10);

  /**
   * How long to wait before sending a refused Submit again after {@code retries} resends, or
   * empty to throw its error: only RESOURCE_EXHAUSTED with a RetryInfo (backpressure: the broker
   * stored nothing) is resent, at most {@link #SUBMIT_RETRIES} times, each wait at most {@link
   * #SUBMIT_RETRY_MAX_DELAY}.
   */
  public static Optional<java.time.Duration> submitRetryDelay(Throwable t, int retries) {
    if (retries >= SUBMIT_RETRIES
        || Status.fromThrowable(t).getCode() != Status.Code.RESOURCE_EXHAUSTED) {
      return Optional.empty();
    }
    return retryDelay(t)
        .map(d -> d.isNegative() ? java.time.Duration.ZERO : d)
        .map(d -> d.compareTo(SUBMIT_RETRY_MAX_DELAY) > 0 ? SUBMIT_RETRY_MAX_DELAY : d);
  }

  /**
   * True when the call failed because the lease is no longer held: ABORTED with an ErrorInfo of
   * domain {@code taskbroker.dev} and reason {@code LEASE_LOST}. A bare ABORTED is not a lost
   * lease (docs/client-spec.md, point 2).
   */
  public static boolean isLeaseLost(Throwable t) {
    if (Status.fromThrowable(t).getCode() != Status.Code.ABORTED) {
      return false;
    }
    return errorInfo(t)
        .map(info -> DOMAIN.equals(info.getDomain()) && LEASE_LOST.equals(info.getReason()))
        .orElse(false);
  }

  /**
   * True for the codes that stop a worker instead of being retried (docs/client-spec.md, point
   * 5): UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED.
   */
  public static boolean stopsWorker(Status.Code code) {
    return code == Status.Code.UNAUTHENTICATED
        || code == Status.Code.PERMISSION_DENIED
        || code == Status.Code.INVALID_ARGUMENT
        || code == Status.Code.UNIMPLEMENTED;
  }

  /**
   * A status description on one line. grpc-java describes a non-gRPC answer over several lines
   * (the HTTP status, the content type, then the headers and the body, an HTML page perhaps):
   * the first two are kept, joined by "; ".
   */
  static String oneLine(String description) {
    if (description == null) {
      return null;
    }
    java.util.List<String> kept = new java.util.ArrayList<>();
    for (String line : description.split("\\R")) {
      String l = line.strip();
      if (l.startsWith("headers:") || l.startsWith("DATA")) {
        break;
      }
      if (!l.isEmpty()) {
        kept.add(l);
      }
    }
    return kept.isEmpty() ? null : String.join("; ", kept);
  }

  /**
   * True when a call failed for a reason of configuration that retrying cannot fix (the rule of
   * {@link Worker.Builder#failFast}): UNAUTHENTICATED or PERMISSION_DENIED; a TLS handshake that
   * failed (a TLS client against a plaintext port, an untrusted certificate, a refused client
   * certificate); or an answer that is not HTTP/2 (a plaintext client against a TLS port, whose
   * first bytes are a TLS record, or an HTTP/1 server).
   */
  public static boolean isConfigurationError(Throwable t) {
    return configurationProblem(t) != null;
  }

  /** What is wrong, in a few words, when {@link #isConfigurationError} holds; else null. */
  static String configurationProblem(Throwable t) {
    Status.Code code = Status.fromThrowable(t).getCode();
    if (code == Status.Code.UNAUTHENTICATED) {
      return "the token was not accepted";
    }
    if (code == Status.Code.PERMISSION_DENIED) {
      return "permission denied";
    }
    for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
      if (c instanceof javax.net.ssl.SSLException) {
        return "the TLS handshake failed";
      }
      String m = c.getMessage();
      if (m != null && m.contains("First received frame was not SETTINGS")) {
        // A TLS record (0x15 alert, 0x16 handshake) where HTTP/2 was expected.
        return m.contains("bytes: 15") || m.contains("bytes: 16")
            ? "the port expects TLS and the client sent plaintext"
            : "the server does not speak gRPC (HTTP/2)";
      }
    }
    return null;
  }

  /**
   * A failed call in plain words for logs: the code and the broker's message, or for a
   * connection error the underlying cause ("UNAVAILABLE: Connection refused: /127.0.0.1:7070")
   * instead of grpc-java's generic "io exception".
   */
  public static String plain(Throwable t) {
    Status st = Status.fromThrowable(t);
    if (st.getCode() == Status.Code.UNKNOWN && st.getDescription() == null && st.getCause() == t) {
      return t.toString(); // not a gRPC failure
    }
    String desc = oneLine(st.getDescription());
    Throwable root = st.getCause();
    while (root != null && root.getCause() != null && root.getCause() != root) {
      root = root.getCause();
    }
    String cause = root != null && root.getMessage() != null ? root.getMessage() : null;
    if (cause != null
        && (desc == null || desc.startsWith("io exception") || desc.startsWith("http2 exception"))) {
      return st.getCode() + ": " + cause;
    }
    return st.getCode() + (desc != null ? ": " + desc : "");
  }
}
