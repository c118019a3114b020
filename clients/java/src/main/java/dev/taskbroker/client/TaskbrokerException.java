package dev.taskbroker.client;

/**
 * The one base class of this library's exceptions, all unchecked: a handler's {@link
 * PermanentException} and {@link RetryableException}, {@link TaskContext.CancelledException}
 * and {@link WorkerStoppedException}. gRPC failures stay grpc-java's {@code
 * StatusRuntimeException}.
 */
public class TaskbrokerException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public TaskbrokerException(String message) {
    super(message);
  }

  public TaskbrokerException(String message, Throwable cause) {
    super(message, cause);
  }
}
