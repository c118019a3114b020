package dev.taskbroker.spring;

import static org.assertj.core.api.Assertions.assertThat;

import dev.taskbroker.client.JsonSerializer;
import dev.taskbroker.client.Serializer;
import dev.taskbroker.client.Taskbroker;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.jackson.JacksonAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/** Payloads go through the application's ObjectMapper, so spring.jackson.* applies. */
class SpringObjectMapperTest {
  record Order(String orderId, Instant placedAt) {}

  private final ApplicationContextRunner runner =
      new ApplicationContextRunner()
          .withConfiguration(AutoConfigurations.of(TaskbrokerAutoConfiguration.class))
          .withPropertyValues("taskbroker.address=127.0.0.1:1", "taskbroker.workers-enabled=false");

  private static String encoded(Taskbroker tb, Object value) {
    return tb.spec("orders", value).getPayload().toString(StandardCharsets.UTF_8);
  }

  @Test
  void springJacksonPropertiesShapeThePayloads() {
    runner
        .withConfiguration(AutoConfigurations.of(JacksonAutoConfiguration.class))
        .withPropertyValues("spring.jackson.property-naming-strategy=SNAKE_CASE")
        .run(
            ctx -> {
              Taskbroker tb = ctx.getBean(Taskbroker.class);
              assertThat(tb.serializer()).isSameAs(ctx.getBean(Serializer.class));
              assertThat(((JsonSerializer) tb.serializer()).mapper())
                  .isSameAs(ctx.getBean(com.fasterxml.jackson.databind.ObjectMapper.class));
              String json = encoded(tb, new Order("o-1", Instant.parse("2026-01-02T03:04:05Z")));
              assertThat(json).contains("\"order_id\":\"o-1\"").contains("\"placed_at\":\"2026-01-02T03:04:05Z\"");
              // A payload field the class lacks is ignored, as the client's own mapper does.
              Order back =
                  tb.serializer()
                      .decode("{\"order_id\":\"o-2\",\"extra\":1}".getBytes(StandardCharsets.UTF_8), Order.class);
              assertThat(back.orderId()).isEqualTo("o-2");
            });
  }

  @Test
  void withoutAnObjectMapperBeanTheClientsOwnMapperIsUsed() {
    runner.run(
        ctx -> {
          Taskbroker tb = ctx.getBean(Taskbroker.class);
          assertThat(encoded(tb, new Order("o-1", Instant.parse("2026-01-02T03:04:05Z"))))
              .contains("\"orderId\":\"o-1\"")
              .contains("\"placedAt\":\"2026-01-02T03:04:05Z\"");
        });
  }

  @Test
  void aSerializerBeanReplacesTheJsonOne() {
    Serializer mine = new JsonSerializer();
    runner
        .withConfiguration(AutoConfigurations.of(JacksonAutoConfiguration.class))
        .withBean(Serializer.class, () -> mine)
        .run(ctx -> assertThat(ctx.getBean(Taskbroker.class).serializer()).isSameAs(mine));
  }
}
