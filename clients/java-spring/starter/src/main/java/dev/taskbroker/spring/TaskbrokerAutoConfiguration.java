package dev.taskbroker.spring;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.taskbroker.client.JsonSerializer;
import dev.taskbroker.client.Middleware;
import dev.taskbroker.client.Serializer;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.testing.InMemoryBroker;
import dev.taskbroker.spring.testing.InMemoryTaskbrokerServer;
import io.micrometer.core.instrument.MeterRegistry;
import java.io.File;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.actuate.autoconfigure.health.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.jackson.JacksonAutoConfiguration;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * A {@link Taskbroker} client from {@code taskbroker.*}, the {@link TaskHandler} methods of every
 * bean, {@link TaskbrokerWorkers} running them, and, with spring-tx, an {@link
 * AfterCommitSubmitter}; with the actuator, a {@link TaskbrokerHealthIndicator}; with {@code
 * taskbroker.in-memory=true}, an in-process fake broker. Each piece steps back for a bean of the
 * same type the application defines.
 */
@AutoConfiguration(after = JacksonAutoConfiguration.class)
@EnableConfigurationProperties(TaskbrokerProperties.class)
public class TaskbrokerAutoConfiguration {

  /**
   * Payloads and results as JSON through the application's {@link ObjectMapper} (Spring Boot's,
   * so {@code spring.jackson.*} and every Jackson module bean apply); without one, the client's
   * own mapper ({@link JsonSerializer#defaultMapper()}).
   */
  @Bean
  @ConditionalOnMissingBean
  public Serializer taskbrokerSerializer(ObjectProvider<ObjectMapper> mapper) {
    ObjectMapper m = mapper.getIfUnique();
    return m == null ? new JsonSerializer() : new JsonSerializer(m);
  }

  /**
   * The client: address, token, TLS from the properties, the {@link Serializer} bean, and the
   * {@link TaskHandler} retry defaults on every Submit ({@link HandlerRetryDefaults}). In the
   * in-memory mode, a channel to the in-process fake instead.
   */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  public Taskbroker taskbroker(
      TaskbrokerProperties p,
      Serializer serializer,
      TaskHandlerMethods handlers,
      ObjectProvider<InMemoryTaskbrokerServer> inMemory) {
    InMemoryTaskbrokerServer fake = p.isInMemory() ? inMemory.getIfAvailable() : null;
    if (fake != null) {
      return Taskbroker.of(fake.channel(), serializer);
    }
    Taskbroker.Builder b =
        Taskbroker.builder(p.getAddress()).token(p.getToken()).intercept(new HandlerRetryDefaults(handlers));
    TaskbrokerProperties.Tls tls = p.getTls();
    if (tls.active()) {
      if (!TaskbrokerProperties.present(tls.getCa())
          && !TaskbrokerProperties.present(tls.getCert())
          && !TaskbrokerProperties.present(tls.getKey())) {
        b.tls();
      } else {
        b.tls(file(tls.getCa()), file(tls.getCert()), file(tls.getKey()));
      }
    }
    b.serializer(serializer);
    return b.build();
  }

  private static File file(String path) {
    return TaskbrokerProperties.present(path) ? new File(path) : null;
  }

  /** Collects the {@link TaskHandler} methods; static, as a bean post-processor must be. */
  @Bean
  @ConditionalOnMissingBean
  public static TaskHandlerMethods taskbrokerHandlerMethods() {
    return new TaskHandlerMethods();
  }

  @Bean
  @ConditionalOnMissingBean
  public TaskbrokerWorkers taskbrokerWorkers(
      Taskbroker taskbroker,
      TaskbrokerProperties properties,
      TaskHandlerMethods handlers,
      ObjectProvider<Middleware> middleware,
      ObjectProvider<TaskbrokerMetrics> metrics,
      ObjectProvider<InMemoryTaskbrokerServer> inMemory) {
    TaskbrokerMetrics m = metrics.getIfAvailable();
    InMemoryTaskbrokerServer fake = properties.isInMemory() ? inMemory.getIfAvailable() : null;
    return new TaskbrokerWorkers(
        taskbroker,
        properties,
        handlers,
        middleware.orderedStream().toList(),
        m == null ? null : m.meterProvider(),
        fake == null ? null : fake.fake());
  }

  /**
   * {@code taskbroker.in-memory=true} (a test's {@code @InMemoryTaskbroker}): an {@link
   * InMemoryBroker} bean that runs the handlers, and the in-process server the client bean talks
   * to.
   */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnProperty(prefix = "taskbroker", name = "in-memory", havingValue = "true")
  static class InMemoryConfiguration {
    @Bean
    @ConditionalOnMissingBean
    InMemoryBroker taskbrokerInMemoryBroker(Serializer serializer) {
      return new InMemoryBroker(serializer);
    }

    @Bean(destroyMethod = "close")
    InMemoryTaskbrokerServer taskbrokerInMemoryServer(InMemoryBroker fake, TaskHandlerMethods handlers) {
      return new InMemoryTaskbrokerServer(fake, new HandlerRetryDefaults(handlers)::apply);
    }
  }

  /**
   * The actuator's {@code taskbroker} health, when the actuator is on the class path ({@code
   * management.health.taskbroker.enabled=false} turns it off). The class check stands on the
   * outer class so that the inner one, which names the actuator's annotation, is read only when
   * the actuator is there.
   */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(name = "org.springframework.boot.actuate.health.HealthIndicator")
  static class HealthConfiguration {
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnEnabledHealthIndicator("taskbroker")
    static class Enabled {
      @Bean
      @ConditionalOnMissingBean(name = "taskbrokerHealthIndicator")
      TaskbrokerHealthIndicator taskbrokerHealthIndicator(
          Taskbroker taskbroker, TaskbrokerProperties properties, ObjectProvider<TaskbrokerWorkers> workers) {
        return new TaskbrokerHealthIndicator(
            taskbroker, workers.getIfAvailable(), properties.isInMemory(), properties.getHealth().getTimeout());
      }
    }
  }

  /**
   * {@link AfterCommitSubmitter}: Submit after the current transaction commits, when Spring's
   * transaction support (spring-tx) is on the class path.
   */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(name = "org.springframework.transaction.support.TransactionSynchronizationManager")
  static class AfterCommitConfiguration {
    @Bean
    @ConditionalOnMissingBean
    AfterCommitSubmitter taskbrokerAfterCommitSubmitter(Taskbroker taskbroker) {
      return new AfterCommitSubmitter(taskbroker);
    }
  }

  /** The workers' metrics into the application's Micrometer registry, when there is one. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(MeterRegistry.class)
  @ConditionalOnProperty(prefix = "taskbroker.metrics", name = "enabled", matchIfMissing = true)
  static class MicrometerMetricsConfiguration {
    @Bean
    @ConditionalOnMissingBean
    TaskbrokerMetrics taskbrokerMetrics(ObjectProvider<MeterRegistry> registry) {
      MeterRegistry r = registry.getIfUnique();
      return new TaskbrokerMetrics(r == null ? null : new MicrometerMeterProvider(r));
    }
  }
}
