package dev.taskbroker.sample;

import dev.taskbroker.client.TaskContext;
import dev.taskbroker.spring.TaskHandler;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.stereotype.Component;

/** Handles the queue {@code emails}: the payload decodes into an Email, the Sent is the result. */
@Component
public class Mailer {
  private static final Logger LOG = LoggerFactory.getLogger(Mailer.class);

  public record Email(String to, String subject) {}

  public record Sent(String messageId, int attempt) {}

  @TaskHandler(queue = "emails")
  public Sent handle(Email email, TaskContext ctx) {
    LOG.info("sending {} to {} (task {}, attempt {})", email.subject(), email.to(), ctx.taskId(), ctx.attempt());
    return new Sent("msg-" + email.to(), ctx.attempt());
  }
}
