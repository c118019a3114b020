/**
 * Testing handlers and producers without a broker.
 *
 * <p>{@link dev.taskbroker.client.testing.TestTaskContext} builds the {@link
 * dev.taskbroker.client.TaskContext} a handler receives (queue, payload, attempt, metadata, the
 * checkpoint an earlier attempt saved) and records what the handler did: its checkpoints, its
 * cancellation checks and, through {@code run}, its {@link dev.taskbroker.client.testing.Outcome}
 * as a worker would report it. {@link dev.taskbroker.client.testing.InMemoryBroker} has the
 * producer calls of {@link dev.taskbroker.client.Taskbroker} and the handler registration of
 * {@link dev.taskbroker.client.Worker.Builder}: a submit runs the queue's handler in-process at
 * once, attempt after attempt as the broker would.
 */
package dev.taskbroker.client.testing;
