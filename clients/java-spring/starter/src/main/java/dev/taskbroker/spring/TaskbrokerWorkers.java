package dev.taskbroker.spring;

import dev.taskbroker.client.Middleware;
import dev.taskbroker.client.Registration;
import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import dev.taskbroker.client.testing.InMemoryBroker;
import io.opentelemetry.api.metrics.MeterProvider;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.DisposableBean;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.context.SmartLifecycle;

/**
 * The application's workers: built once every singleton exists (so every {@link TaskHandler}
 * has been found), started when the context is ready ({@link SmartLifecycle}, last phase, so
 * after the web server) and stopped first when it closes, each within its stop timeout.
 *
 * <p>Each configured worker ({@code taskbroker.workers.NAME}) takes the handlers of the queues
 * it lists; the one worker that lists none takes every other handler. With no worker configured,
 * a worker named {@code default} takes them all. A listed queue without a handler, a queue in
 * two workers, or a handler no worker takes fails the start, naming the queue.
 *
 * <p>The workers' own threads are daemon threads. While at least one worker runs, one non-daemon
 * thread ({@code taskbroker-keep-alive}) keeps the JVM alive, as a listener container's threads
 * do: an application without a web server keeps running after its start until the context
 * closes (SIGTERM: Spring Boot's shutdown hook closes it, and the workers drain), or until every
 * worker has stopped on its own. {@code taskbroker.keep-alive=false} starts no such thread.
 */
public class TaskbrokerWorkers implements SmartInitializingSingleton, SmartLifecycle, DisposableBean {
  /** The name of the worker made when none is configured. */
  public static final String DEFAULT_WORKER = "default";

  private static final Logger LOG = LoggerFactory.getLogger(TaskbrokerWorkers.class);

  private final Taskbroker taskbroker;
  private final TaskbrokerProperties properties;
  private final TaskHandlerMethods handlers;
  private final List<Middleware> middleware;
  private final MeterProvider meterProvider;
  private final InMemoryBroker inMemory;
  private final Map<String, Worker> workers = new LinkedHashMap<>();
  private final Map<String, Duration> stopTimeouts = new LinkedHashMap<>();
  private volatile boolean running;
  /** Released by {@link #stop()}, {@link #destroy()}, or the last worker stopping on its own. */
  private volatile CountDownLatch keepAlive = new CountDownLatch(0);
  private volatile Thread keepAliveThread;

  /**
   * @param meterProvider where the workers' metrics go; null: the global OpenTelemetry's
   */
  public TaskbrokerWorkers(
      Taskbroker taskbroker,
      TaskbrokerProperties properties,
      TaskHandlerMethods handlers,
      List<Middleware> middleware,
      MeterProvider meterProvider) {
    this(taskbroker, properties, handlers, middleware, meterProvider, null);
  }

  /**
   * @param inMemory the in-memory mode's fake: it takes every handler and the middleware, and no
   *     worker is built; null: workers against the broker
   */
  public TaskbrokerWorkers(
      Taskbroker taskbroker,
      TaskbrokerProperties properties,
      TaskHandlerMethods handlers,
      List<Middleware> middleware,
      MeterProvider meterProvider,
      InMemoryBroker inMemory) {
    this.taskbroker = taskbroker;
    this.properties = properties;
    this.handlers = handlers;
    this.middleware = List.copyOf(middleware);
    this.meterProvider = meterProvider;
    this.inMemory = inMemory;
  }

  @Override
  public void afterSingletonsInstantiated() {
    if (inMemory != null) {
      middleware.forEach(inMemory::middleware);
      handlers.handlers().forEach(h -> inMemory.register(h.registration()));
      // A task submitted while the context was starting (before the handlers were known) runs now.
      inMemory.runPending();
      LOG.info("taskbroker in memory (taskbroker.in-memory=true): no worker started; a submit runs its handler at once");
      return;
    }
    if (!properties.isWorkersEnabled()) {
      LOG.info("taskbroker workers disabled (taskbroker.workers-enabled=false)");
      return;
    }
    Map<String, TaskbrokerProperties.WorkerProperties> configured = properties.getWorkers();
    if (configured.isEmpty()) {
      configured = Map.of(DEFAULT_WORKER, new TaskbrokerProperties.WorkerProperties());
    }
    Map<String, TaskHandlerMethods.Handler> handlerOf = new LinkedHashMap<>();
    for (TaskHandlerMethods.Handler h : handlers.handlers()) {
      handlerOf.put(h.queue(), h);
    }
    Map<String, String> owner = new LinkedHashMap<>();
    String catchAll = null;
    for (Map.Entry<String, TaskbrokerProperties.WorkerProperties> e : configured.entrySet()) {
      List<String> queues = e.getValue().getQueues();
      if (queues.isEmpty()) {
        if (catchAll != null) {
          throw new IllegalStateException(
              "taskbroker.workers."
                  + catchAll
                  + " and taskbroker.workers."
                  + e.getKey()
                  + " both list no queues; at most one worker may take the handlers no other lists");
        }
        catchAll = e.getKey();
      }
      for (String q : queues) {
        String before = owner.putIfAbsent(q, e.getKey());
        if (before != null) {
          throw new IllegalStateException(
              "queue " + q + " is listed by taskbroker.workers." + before + " and taskbroker.workers." + e.getKey());
        }
        if (!handlerOf.containsKey(q)) {
          throw new IllegalStateException(
              "taskbroker.workers." + e.getKey() + ".queues: queue " + q + " has no @TaskHandler method");
        }
      }
    }
    for (String q : handlerOf.keySet()) {
      if (!owner.containsKey(q)) {
        if (catchAll == null) {
          throw new IllegalStateException(
              "the @TaskHandler of queue " + q + " is in no worker: list it in taskbroker.workers.NAME.queues");
        }
        owner.put(q, catchAll);
      }
    }
    for (Map.Entry<String, TaskbrokerProperties.WorkerProperties> e : configured.entrySet()) {
      List<Registration> shared = new ArrayList<>();
      Map<String, TaskHandlerMethods.Handler> own = new LinkedHashMap<>();
      owner.forEach(
          (q, w) -> {
            if (w.equals(e.getKey())) {
              TaskHandlerMethods.Handler h = handlerOf.get(q);
              if (h.concurrency() > 0) {
                own.put(q, h);
              } else {
                shared.add(h.registration());
              }
            }
          });
      if (shared.isEmpty() && own.isEmpty()) {
        if (!properties.getWorkers().isEmpty()) {
          LOG.warn("taskbroker worker {} has no queues to lease from (no @TaskHandler left for it); not started", e.getKey());
        }
        continue;
      }
      if (!shared.isEmpty()) {
        add(e.getKey(), e.getValue(), e.getValue().getConcurrency(), shared);
      }
      // A handler with its own concurrency: a worker of its own, the same settings otherwise.
      own.forEach((q, h) -> add(e.getKey() + "/" + q, e.getValue(), h.concurrency(), List.of(h.registration())));
    }
    if (workers.isEmpty()) {
      LOG.info("taskbroker: no @TaskHandler methods; no worker started");
    }
  }

  private void add(String name, TaskbrokerProperties.WorkerProperties p, int concurrency, List<Registration> registrations) {
    workers.put(name, build(name, p, concurrency, registrations));
    stopTimeouts.put(name, p.getStopTimeout());
  }

  private Worker build(
      String name, TaskbrokerProperties.WorkerProperties p, int concurrency, List<Registration> registrations) {
    try {
      return builder(p, registrations).concurrency(concurrency).build();
    } catch (IllegalArgumentException | NullPointerException e) {
      throw new IllegalStateException("taskbroker.workers." + name + ": " + e.getMessage(), e);
    }
  }

  private Worker.Builder builder(TaskbrokerProperties.WorkerProperties p, List<Registration> registrations) {
    Worker.Builder b =
        Worker.builder(taskbroker)
            .registrations(registrations)
            .concurrency(p.getConcurrency())
            .leaseDuration(p.getLeaseDuration())
            .pollWait(p.getPollWait())
            .stopTimeout(p.getStopTimeout())
            .stopGrace(p.getStopGrace())
            .leaseNext(p.isLeaseNext())
            .labels(p.getLabels())
            .failFast(p.getFailFast() != null ? p.getFailFast() : properties.isFailFast());
    if (TaskbrokerProperties.present(p.getWorkerId())) {
      b.workerId(p.getWorkerId());
    }
    if (meterProvider != null) {
      b.meterProvider(meterProvider);
    }
    middleware.forEach(b::middleware);
    return b;
  }

  /** The workers by name (those with at least one queue). */
  public Map<String, Worker> workers() {
    return Collections.unmodifiableMap(workers);
  }

  @Override
  public void start() {
    CountDownLatch alive = new CountDownLatch(workers.isEmpty() ? 0 : 1);
    keepAlive = alive;
    if (!workers.isEmpty() && properties.isKeepAlive()) {
      Thread t = new Thread(() -> awaitQuietly(alive), "taskbroker-keep-alive");
      t.setDaemon(false);
      t.start();
      keepAliveThread = t;
    }
    AtomicInteger live = new AtomicInteger(workers.size());
    for (Map.Entry<String, Worker> e : workers.entrySet()) {
      Worker w = e.getValue();
      w.start();
      LOG.info("taskbroker worker {} ({}) started on {}", e.getKey(), w.workerId(), w.queues());
      Thread watch =
          new Thread(
              () -> {
                watch(e.getKey(), w);
                if (live.decrementAndGet() == 0) {
                  alive.countDown();
                }
              },
              "taskbroker-watch-" + e.getKey());
      watch.setDaemon(true);
      watch.start();
    }
    running = true;
  }

  private static void awaitQuietly(CountDownLatch latch) {
    try {
      latch.await();
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
    }
  }

  /** The non-daemon thread of the last start; null when none was started. */
  Thread keepAliveThread() {
    return keepAliveThread;
  }

  /** Logs a worker that stopped on its own (the broker refused it, or failFast). */
  private void watch(String name, Worker w) {
    try {
      w.awaitStopped();
    } catch (RuntimeException e) {
      LOG.error("taskbroker worker {} stopped: {}", name, e.getMessage());
    }
  }

  /**
   * Stops every worker at once, in parallel, each within its stop timeout + stop grace + 1 s;
   * returns when all have drained.
   */
  @Override
  public void stop() {
    running = false;
    List<Thread> stopping = new ArrayList<>();
    for (Map.Entry<String, Worker> e : workers.entrySet()) {
      Duration timeout = stopTimeouts.get(e.getKey());
      Thread t =
          new Thread(
              () -> {
                long t0 = System.nanoTime();
                e.getValue().stop(timeout);
                LOG.info(
                    "taskbroker worker {} stopped in {} ms",
                    e.getKey(),
                    (System.nanoTime() - t0) / 1_000_000);
              },
              "taskbroker-stop-" + e.getKey());
      t.start();
      stopping.add(t);
    }
    for (Thread t : stopping) {
      try {
        t.join();
      } catch (InterruptedException ie) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    // After the drain: the JVM may exit once the context has finished closing.
    keepAlive.countDown();
  }

  @Override
  public boolean isRunning() {
    return running;
  }

  /** Last phase: started after everything else (the web server too), stopped first. */
  @Override
  public int getPhase() {
    return SmartLifecycle.DEFAULT_PHASE;
  }

  /** Workers built but never started (a context that failed to start) release their threads. */
  @Override
  public void destroy() {
    keepAlive.countDown();
    for (Worker w : workers.values()) {
      if (!w.isRunning()) {
        w.stop(Duration.ZERO);
      }
    }
  }
}
