package dev.taskbroker.spring;

import dev.taskbroker.client.Registration;
import dev.taskbroker.client.TaskContext;
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
import org.springframework.core.MethodIntrospector;
import org.springframework.core.annotation.AnnotatedElementUtils;

/**
 * Finds the {@link TaskHandler} methods of every bean as it is created and turns each into a
 * {@link Registration} of the Java client: the payload type from the method's parameter, the
 * return value as the result. A method the starter cannot call, or a queue with two handlers,
 * fails the application's start with a message naming the method.
 */
public class TaskHandlerMethods implements BeanPostProcessor {
  /** One annotated method and the registration made from it. */
  public record Handler(String queue, String beanName, Method method, Registration registration) {}

  private final Map<String, Handler> byQueue = Collections.synchronizedMap(new LinkedHashMap<>());

  @Override
  public Object postProcessAfterInitialization(Object bean, String beanName) throws BeansException {
    Class<?> target = AopUtils.getTargetClass(bean);
    Map<Method, TaskHandler> found =
        MethodIntrospector.selectMethods(
            target,
            (MethodIntrospector.MetadataLookup<TaskHandler>)
                m -> AnnotatedElementUtils.findMergedAnnotation(m, TaskHandler.class));
    for (Map.Entry<Method, TaskHandler> e : found.entrySet()) {
      add(bean, beanName, e.getKey(), e.getValue().queue());
    }
    return bean;
  }

  /** The handlers found so far, in the order their beans were created. */
  public List<Handler> handlers() {
    synchronized (byQueue) {
      return List.copyOf(new ArrayList<>(byQueue.values()));
    }
  }

  void add(Object bean, String beanName, Method declared, String queue) {
    String where = declared.getDeclaringClass().getName() + "." + declared.getName();
    if (queue == null || queue.isEmpty()) {
      throw new IllegalStateException("@TaskHandler " + where + ": queue must not be empty");
    }
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
                if (cause instanceof Exception ex) {
                  throw ex;
                }
                if (cause instanceof Error err) {
                  throw err;
                }
                throw ite;
              }
            });
    Handler h = new Handler(queue, beanName, declared, registration);
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
}
