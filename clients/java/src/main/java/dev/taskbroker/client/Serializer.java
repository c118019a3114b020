package dev.taskbroker.client;

import java.lang.reflect.Type;

/**
 * Turns typed payloads and results into bytes and back: used by {@link Taskbroker#submit(String,
 * Object)}, by typed handlers ({@link Worker.Builder#handle(String, Class, TypedHandler)}) for the
 * payload they receive and the result they return, and by {@link Taskbroker#result}. The default
 * is {@link JsonSerializer} (JSON, UTF-8, Jackson).
 *
 * <p>Both methods throw {@link SerializationException} for a value or bytes they cannot handle.
 */
public interface Serializer {
  /** The bytes of {@code value}; never called with null (a null result is an empty result). */
  byte[] encode(Object value);

  /** The value of type {@code type} that {@code data} holds. */
  <T> T decode(byte[] data, Class<T> type);

  /**
   * The value of a generic type ({@code List<Email>}, from reflection). The default handles a
   * plain class only; {@link JsonSerializer} handles any type.
   */
  default Object decode(byte[] data, Type type) {
    if (type instanceof Class<?> c) {
      return decode(data, c);
    }
    throw new SerializationException(
        getClass().getSimpleName() + " cannot decode the generic type " + type.getTypeName());
  }
}
