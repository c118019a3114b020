package dev.taskbroker.spring;

import com.google.protobuf.Duration;
import dev.taskbroker.client.PermanentException;
import dev.taskbroker.client.Registration;
import dev.taskbroker.client.TaskContext;
import dev.taskbroker.v1.RetryPolicy;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Type;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.springframework.aop.support.AopUtils;
import org.springframework.beans.BeansException;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.boot.convert.DurationStyle;
import org.springframework.context.EnvironmentAware;
import org.springframework.core.env.Environment;
import org.springframework.core.MethodIntrospector;
import org.springframework.core.annotation.AnnotatedElementUtils;

/**
 * Finds the {@link TaskHandler} methods of every bean as it is created and turns each into a
 * {@link Registration} of the Java client: the payload type from the method's parameter, the
 * return value as the result. A method the starter cannot call, a queue with two handlers, or
 * an attribute out of range fails the application's start with a message naming the method.
 */
public class TaskHandlerMethods implements BeanPostProcessor, EnvironmentAware {
  /**
   * One annotated method and the registration made from it.
   *
   * @param retry the annotation's retry defaults, fields left unset where it gives none ({@link
   *     RetryPolicy#getDefaultInstance()} when it gives none at all)
   * @param concurrency the queue's own slots; 0 when it shares its worker's
   */
  public record Handler(
      String queue,
      String beanName,
      Method method,
      Registration registration,
      RetryPolicy retry,
      int concurrency) {}

  private final Map<String, Handler> byQueue = Collections.synchronizedMap(new LinkedHashMap<>());
  private Environment environment;

  /**
   * Resolves {@code ${...}} placeholders in the string attributes ({@code queue}, {@code backoff},
   * {@code maxBackoff}) against the application's properties; without it (a handler collected
   * outside a context) they are taken as written.
   */
  @Override
  public void setEnvironment(Environment environment) {
    this.environment = environment;
  }

  private String resolve(String where, String attribute, String value) {
    if (environment == null || value.isEmpty()) {
      return value;
    }
    try {
      return environment.resolveRequiredPlaceholders(value);
    } catch (IllegalArgumentException e) {
      throw new IllegalStateException("@TaskHandler " + where + ": " + attribute + ": " + e.getMessage());
    }
  }

  @Override
  public Object postProcessAfterInitialization(Object bean, String beanName) throws BeansException {
    Class<?> target = AopUtils.getTargetClass(bean);
    Map<Method, TaskHandler> found =
        MethodIntrospector.selectMethods(
            target,
            (MethodIntrospector.MetadataLookup<TaskHandler>)
                m -> AnnotatedElementUtils.findMergedAnnotation(m, TaskHandler.class));
    for (Map.Entry<Method, TaskHandler> e : found.entrySet()) {
      add(bean, beanName, e.getKey(), e.getValue());
    }
    return bean;
  }

  /** The handler of {@code queue}, or null. */
  public Handler handler(String queue) {
    return byQueue.get(queue);
  }

  /** The handlers found so far, in the order their beans were created. */
  public List<Handler> handlers() {
    synchronized (byQueue) {
      return List.copyOf(new ArrayList<>(byQueue.values()));
    }
  }

  void add(Object bean, String beanName, Method declared, TaskHandler a) {
    String where = declared.getDeclaringClass().getName() + "." + declared.getName();
    String queue = a.queue() == null ? null : resolve(where, "queue", a.queue());
    if (queue == null || queue.isEmpty()) {
      throw new IllegalStateException("@TaskHandler " + where + ": queue must not be empty");
    }
    RetryPolicy retry = retry(where, a, resolve(where, "backoff", a.backoff()), resolve(where, "maxBackoff", a.maxBackoff()));
    if (a.concurrency() < 0 || a.concurrency() > 256) {
      throw new IllegalStateException(
          "@TaskHandler " + where + ": concurrency must be 1 to 256 (0: the worker's), not " + a.concurrency());
    }
    List<Class<? extends Throwable>> nonRetryable = List.of(a.nonRetryable());
    // Called on the bean as Spring hands it out (a proxy when there is one), so @Transactional
    // and other advice apply.
    Method method = AopUtils.selectInvocableMethod(declared, bean.getClass());
    Type[] params = declared.getGenericParameterTypes();
    int contextAt = -1;
    int payloadAt = -1;
    for (int i = 0; i < params.length; i++) {
      if (params[i] == TaskContext.class) {
        if (contextAt >= 0) {
          throw new IllegalStateException(
              "@TaskHandler " + where + ": at most one TaskContext parameter");
        }
        contextAt = i;
      } else {
        if (payloadAt >= 0) {
          throw new IllegalStateException(
              "@TaskHandler "
                  + where
                  + ": at most one payload parameter besides the TaskContext, found "
                  + params[payloadAt].getTypeName()
                  + " and "
                  + params[i].getTypeName());
        }
        payloadAt = i;
      }
    }
    method.setAccessible(true);
    int ctxIndex = contextAt;
    int payloadIndex = payloadAt;
    int arity = params.length;
    // Without a payload parameter the bytes are taken as they are and not decoded.
    Type payloadType = payloadAt >= 0 ? params[payloadAt] : byte[].class;
    Registration registration =
        Registration.ofType(
            queue,
            payloadType,
            (task, payload) -> {
              Object[] args = new Object[arity];
              if (ctxIndex >= 0) {
                args[ctxIndex] = task;
              }
              if (payloadIndex >= 0) {
                args[payloadIndex] = payload;
              }
              try {
                return method.invoke(bean, args);
              } catch (InvocationTargetException ite) {
                Throwable cause = ite.getCause();
                if (!(cause instanceof PermanentException) && isAny(cause, nonRetryable)) {
                  throw new PermanentException(String.valueOf(cause.getMessage()), cause);
                }
                if (cause instanceof Exception ex) {
                  throw ex;
                }
                if (cause instanceof Error err) {
                  throw err;
                }
                throw ite;
              }
            });
    Handler h = new Handler(queue, beanName, declared, registration, retry, a.concurrency());
    Handler before = byQueue.putIfAbsent(queue, h);
    if (before != null) {
      throw new IllegalStateException(
          "queue "
              + queue
              + " has two @TaskHandler methods: "
              + before.method().getDeclaringClass().getName()
              + "."
              + before.method().getName()
              + " and "
              + where);
    }
  }

  /** Whether {@code t} or one of its causes is an instance of one of {@code types}. */
  private static boolean isAny(Throwable t, List<Class<? extends Throwable>> types) {
    Throwable c = t;
    for (int depth = 0; c != null && depth < 32; depth++, c = c.getCause()) {
      for (Class<? extends Throwable> type : types) {
        if (type.isInstance(c)) {
          return true;
        }
      }
    }
    return false;
  }

  private static RetryPolicy retry(String where, TaskHandler a, String backoff, String maxBackoff) {
    RetryPolicy.Builder r = RetryPolicy.newBuilder();
    if (a.maxAttempts() < 0) {
      throw new IllegalStateException(
          "@TaskHandler " + where + ": maxAttempts must be at least 1 (0: unset), not " + a.maxAttempts());
    }
    r.setMaxAttempts(a.maxAttempts());
    if (a.backoffMultiplier() != 0 && !(a.backoffMultiplier() >= 1)) {
      throw new IllegalStateException(
          "@TaskHandler " + where + ": backoffMultiplier must be at least 1 (0: unset), not " + a.backoffMultiplier());
    }
    r.setBackoffMultiplier(a.backoffMultiplier());
    if (!backoff.isEmpty()) {
      r.setInitialBackoff(duration(where, "backoff", backoff));
    }
    if (!maxBackoff.isEmpty()) {
      r.setMaxBackoff(duration(where, "maxBackoff", maxBackoff));
    }
    return r.build();
  }

  private static Duration duration(String where, String attribute, String text) {
    java.time.Duration d;
    try {
      d = DurationStyle.detectAndParse(text);
    } catch (IllegalArgumentException e) {
      throw new IllegalStateException(
          "@TaskHandler " + where + ": " + attribute + " \"" + text + "\" is not a duration (10s, 500ms, PT1M)");
    }
    if (d.isNegative()) {
      throw new IllegalStateException("@TaskHandler " + where + ": " + attribute + " must not be negative, not " + text);
    }
    return Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
  }
}
