/**
 * Java client for the taskbroker v1 gRPC API.
 *
 * <ul>
 *   <li>{@link dev.taskbroker.client.Taskbroker}: one channel and the stubs of both services.
 *   <li>{@link dev.taskbroker.client.ErrorDetails}: the google.rpc.ErrorInfo of a failed call.
 *   <li>{@link dev.taskbroker.client.Worker}: leases tasks for free slots only, for many queues
 *       with a handler each ({@link dev.taskbroker.client.Registration}, typed by {@link
 *       dev.taskbroker.client.TypedHandler} or raw by {@link dev.taskbroker.client.TaskHandler}),
 *       runs {@link dev.taskbroker.client.Middleware} around them, heartbeats every running lease
 *       in one call, reports results and failures (Completes batched by the completer), records
 *       OpenTelemetry metrics, stops gracefully.
 *   <li>{@link dev.taskbroker.client.Serializer}: typed payloads and results; {@link
 *       dev.taskbroker.client.JsonSerializer} (Jackson) is the default.
 *   <li>{@link dev.taskbroker.client.TaskContext}: what a handler sees of one task.
 * </ul>
 *
 * The messages and stubs themselves are generated at build time into {@code dev.taskbroker.v1}.
 */
package dev.taskbroker.client;
