package dev.taskbroker.spring;

import io.opentelemetry.api.metrics.MeterProvider;

/**
 * Where the workers' metrics go: the Micrometer registry through {@link MicrometerMeterProvider}
 * when the application has one; null: the global OpenTelemetry's (nothing without an SDK).
 * Define this bean to send them to an OpenTelemetry SDK's provider instead.
 */
public record TaskbrokerMetrics(MeterProvider meterProvider) {}
