package dev.taskbroker.client;

/** A {@link Serializer} could not encode a value or decode bytes; the message is one line. */
public class SerializationException extends TaskbrokerException {
  private static final long serialVersionUID = 1L;

  public SerializationException(String message) {
    super(message);
  }

  public SerializationException(String message, Throwable cause) {
    super(message, cause);
  }
}
