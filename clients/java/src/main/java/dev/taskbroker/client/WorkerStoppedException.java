package dev.taskbroker.client;

/**
 * A worker stopped on its own because the broker refused its Lease with a code that retrying
 * cannot fix (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED), or, with
 * {@link Worker.Builder#failFast(boolean) failFast}, because the Lease failed for a reason of
 * configuration (TLS, not a gRPC server); the cause is the {@code StatusRuntimeException}. Thrown by {@link Worker#run()} and {@link
 * Worker#awaitStopped()}.
 */
public final class WorkerStoppedException extends TaskbrokerException {
  private static final long serialVersionUID = 1L;

  public WorkerStoppedException(String message, Throwable cause) {
    super(message, cause);
  }
}
