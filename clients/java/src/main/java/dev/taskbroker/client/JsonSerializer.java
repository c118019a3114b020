package dev.taskbroker.client;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JavaType;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.datatype.jsr310.JavaTimeModule;
import java.io.IOException;
import java.lang.reflect.Type;

/**
 * The default {@link Serializer}: JSON in UTF-8 through a Jackson {@link ObjectMapper}. Records,
 * beans, maps, lists and {@code JsonNode} all work; {@code java.time} values are ISO-8601
 * strings; properties a payload has and the class lacks are ignored, so a producer can add a
 * field before every worker knows it. Pass your own mapper to change any of that.
 */
public final class JsonSerializer implements Serializer {
  private final ObjectMapper mapper;

  /** JSON with the defaults above. */
  public JsonSerializer() {
    this(defaultMapper());
  }

  /** JSON through {@code mapper}, used as it is. */
  public JsonSerializer(ObjectMapper mapper) {
    this.mapper = java.util.Objects.requireNonNull(mapper, "mapper");
  }

  /** The mapper the default constructor uses: a fresh one each call, to adjust and pass back. */
  public static ObjectMapper defaultMapper() {
    return new ObjectMapper()
        .registerModule(new JavaTimeModule())
        .disable(SerializationFeature.WRITE_DATES_AS_TIMESTAMPS)
        .disable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES);
  }

  public ObjectMapper mapper() {
    return mapper;
  }

  @Override
  public byte[] encode(Object value) {
    try {
      return mapper.writeValueAsBytes(value);
    } catch (JsonProcessingException e) {
      throw new SerializationException(oneLine(e), e);
    }
  }

  @Override
  public <T> T decode(byte[] data, Class<T> type) {
    return type.cast(read(data, mapper.constructType(type)));
  }

  @Override
  public Object decode(byte[] data, Type type) {
    return read(data, mapper.constructType(type));
  }

  private Object read(byte[] data, JavaType type) {
    try {
      return mapper.readValue(data, type);
    } catch (IOException e) {
      throw new SerializationException(oneLine(e), e);
    }
  }

  /** Jackson's message without the source excerpt and location lines it appends. */
  private static String oneLine(IOException e) {
    String m =
        e instanceof JsonProcessingException j && j.getOriginalMessage() != null
            ? j.getOriginalMessage()
            : String.valueOf(e.getMessage());
    return m.replaceAll("\\s+", " ").trim();
  }
}
