package dev.taskbroker.spring;

import dev.taskbroker.client.Middleware;
import dev.taskbroker.client.Serializer;
import dev.taskbroker.client.Taskbroker;
import io.micrometer.core.instrument.MeterRegistry;
import java.io.File;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * A {@link Taskbroker} client from {@code taskbroker.*}, the {@link TaskHandler} methods of every
 * bean, {@link TaskbrokerWorkers} running them, and, with spring-tx, an {@link
 * AfterCommitSubmitter}. Each piece steps back for a bean of the same
 * type the application defines.
 */
@AutoConfiguration
@EnableConfigurationProperties(TaskbrokerProperties.class)
public class TaskbrokerAutoConfiguration {

  /** The client: address, token, TLS from the properties; a {@link Serializer} bean if any. */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  public Taskbroker taskbroker(TaskbrokerProperties p, ObjectProvider<Serializer> serializer) {
    Taskbroker.Builder b = Taskbroker.builder(p.getAddress()).token(p.getToken());
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
    serializer.ifAvailable(b::serializer);
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
      ObjectProvider<TaskbrokerMetrics> metrics) {
    TaskbrokerMetrics m = metrics.getIfAvailable();
    return new TaskbrokerWorkers(
        taskbroker,
        properties,
        handlers,
        middleware.orderedStream().toList(),
        m == null ? null : m.meterProvider());
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
