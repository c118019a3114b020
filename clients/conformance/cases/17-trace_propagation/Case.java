/*
 * The conformance case trace_propagation, for the Java client: README.md beside this file says
 * what it does and expects. Compiled from a test source root of clients/java (pom.xml); the
 * harness (Conformance) loads it by name.
 */
package dev.taskbroker.conformance;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.v1.TaskSpec;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.TraceFlags;
import io.opentelemetry.api.trace.TraceState;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.Scope;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import static dev.taskbroker.conformance.SpecCases.*;

final class TracePropagationCase implements ConformanceCase {
  @Override
  public void run(Taskbroker tb, String queue) throws Exception {
    traceContext(tb, queue);
  }

  static void traceContext(Taskbroker tb, String queue) throws Exception {
    SpanContext sc =
        SpanContext.createFromRemoteParent(
            TRACE_ID, "00f067aa0ba902b7", TraceFlags.getSampled(), TraceState.getDefault());
    String id;
    Scope scope = Context.root().with(Span.wrap(sc)).makeCurrent();
    try {
      id = submit(tb, TaskSpec.newBuilder().setQueue(queue).build());
    } finally {
      scope.close();
    }
    String tp = get(tb, id).getMetadataMap().get("traceparent");
    check(TRACEPARENT.equals(tp), "metadata traceparent " + tp + ", want " + TRACEPARENT);
    CompletableFuture<String> seen = new CompletableFuture<>();
    try (Worker w =
        worker(
                tb,
                queue,
                ctx -> {
                  seen.complete(Span.current().getSpanContext().getTraceId());
                  return null;
                })
            .build()) {
      w.start();
      String got = seen.get(20, TimeUnit.SECONDS);
      check(TRACE_ID.equals(got), "handler saw trace id " + got + ", want " + TRACE_ID);
    }
  }
}
