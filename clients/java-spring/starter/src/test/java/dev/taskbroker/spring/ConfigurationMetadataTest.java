package dev.taskbroker.spring;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.beans.PropertyDescriptor;
import java.io.InputStream;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.beans.BeanUtils;
import org.springframework.boot.convert.DurationStyle;

/**
 * The configuration metadata the IDE reads (META-INF/spring-configuration-metadata.json, from
 * the processor and additional-spring-configuration-metadata.json) documents every key: the
 * top-level ones, and each worker's under taskbroker.workers.*, with the defaults the code has.
 */
class ConfigurationMetadataTest {
  private static Map<String, JsonNode> properties() throws Exception {
    try (InputStream in =
        ConfigurationMetadataTest.class.getResourceAsStream("/META-INF/spring-configuration-metadata.json")) {
      assertThat(in).as("spring-configuration-metadata.json on the class path").isNotNull();
      Map<String, JsonNode> byName = new HashMap<>();
      for (JsonNode p : new ObjectMapper().readTree(in).get("properties")) {
        byName.put(p.get("name").asText(), p);
      }
      return byName;
    }
  }

  private static String kebab(String name) {
    return name.replaceAll("([a-z0-9])([A-Z])", "$1-$2").toLowerCase();
  }

  private static List<PropertyDescriptor> settable(Class<?> type) {
    return java.util.Arrays.stream(BeanUtils.getPropertyDescriptors(type))
        .filter(d -> d.getWriteMethod() != null)
        .toList();
  }

  @Test
  void everyWorkerSettingHasADescribedEntryWithItsDefault() throws Exception {
    Map<String, JsonNode> meta = properties();
    TaskbrokerProperties.WorkerProperties defaults = new TaskbrokerProperties.WorkerProperties();
    List<PropertyDescriptor> settings = settable(TaskbrokerProperties.WorkerProperties.class);
    assertThat(settings).hasSizeGreaterThanOrEqualTo(10);
    for (PropertyDescriptor d : settings) {
      String name = "taskbroker.workers.*." + kebab(d.getName());
      JsonNode p = meta.get(name);
      assertThat(p).as(name + " in the metadata").isNotNull();
      assertThat(p.path("description").asText()).as(name + " described").isNotBlank();
      Object value = d.getReadMethod().invoke(defaults);
      JsonNode declared = p.get("defaultValue");
      if (value instanceof Duration dur) {
        assertThat(declared).as(name + " default").isNotNull();
        assertThat(DurationStyle.detectAndParse(declared.asText())).as(name + " default").isEqualTo(dur);
      } else if (value instanceof Integer || value instanceof Boolean) {
        assertThat(declared).as(name + " default").isNotNull();
        assertThat(declared.asText()).as(name + " default").isEqualTo(value.toString());
      } else if (value instanceof java.util.Collection<?> c) {
        assertThat(c).isEmpty();
      } else if (value instanceof Map<?, ?> m) {
        assertThat(m).isEmpty();
      } else {
        assertThat(value).as(name + " has no default").isNull();
        assertThat(declared).as(name + " declares no default").isNull();
      }
    }
  }

  @Test
  void everyTopLevelSettingIsDescribed() throws Exception {
    Map<String, JsonNode> meta = properties();
    for (String name :
        List.of(
            "taskbroker.address",
            "taskbroker.token",
            "taskbroker.tls.enabled",
            "taskbroker.tls.ca",
            "taskbroker.fail-fast",
            "taskbroker.workers-enabled",
            "taskbroker.keep-alive",
            "taskbroker.metrics.enabled",
            "taskbroker.health.timeout",
            "taskbroker.in-memory",
            "taskbroker.workers")) {
      assertThat(meta.get(name)).as(name).isNotNull();
      assertThat(meta.get(name).path("description").asText()).as(name + " described").isNotBlank();
    }
  }
}
