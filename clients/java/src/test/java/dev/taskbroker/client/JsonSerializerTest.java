package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The default serializer: JSON in UTF-8, records, java.time, generic types, one-line errors. */
class JsonSerializerTest {
  public record Event(String name, Instant at) {}

  private final JsonSerializer json = new JsonSerializer();

  private static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void recordsWithJavaTimeRoundTripAsIsoStrings() {
    Event e = new Event("é", Instant.parse("2026-01-02T03:04:05Z"));
    byte[] bytes = json.encode(e);
    assertEquals("{\"name\":\"é\",\"at\":\"2026-01-02T03:04:05Z\"}", new String(bytes, StandardCharsets.UTF_8));
    assertEquals(e, json.decode(bytes, Event.class));
  }

  @Test
  void propertiesTheClassLacksAreIgnored() {
    assertEquals(new Event("x", null), json.decode(utf8("{\"name\":\"x\",\"new\":1}"), Event.class));
  }

  @Test
  void genericTypesDecodeThroughReflectionTypes() throws Exception {
    java.lang.reflect.Type listOfEvents =
        JsonSerializerTest.class.getDeclaredMethod("events").getGenericReturnType();
    Object v = json.decode(utf8("[{\"name\":\"a\"},{\"name\":\"b\"}]"), listOfEvents);
    assertEquals(List.of(new Event("a", null), new Event("b", null)), v);
  }

  static List<Event> events() {
    return List.of();
  }

  @Test
  void badInputAndUnencodableValuesAreOneLineSerializationErrors() {
    SerializationException bad =
        assertThrows(SerializationException.class, () -> json.decode(utf8("not json"), Event.class));
    assertFalse(bad.getMessage().contains("\n"), bad.getMessage());
    SerializationException enc = assertThrows(SerializationException.class, () -> json.encode(new Object()));
    assertFalse(enc.getMessage().contains("\n"), enc.getMessage());
  }
}
