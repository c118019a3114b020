package dev.taskbroker.client;

/** The task can never succeed (bad input): reported as Fail(non_retryable), the task goes DEAD. */
public class PermanentException extends TaskbrokerException {
  private static final long serialVersionUID = 1L;

  public PermanentException(String message) {
    super(message);
  }

  public PermanentException(String message, Throwable cause) {
    super(message, cause);
  }
}
