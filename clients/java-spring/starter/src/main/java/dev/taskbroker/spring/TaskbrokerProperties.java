package dev.taskbroker.spring;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * The {@code taskbroker.*} settings: where the broker is, how to reach it, and the workers that
 * run the application's {@link TaskHandler} methods.
 *
 * <pre>
 * taskbroker:
 *   address: broker.internal:50051
 *   token: ${TASKBROKER_TOKEN:}
 *   tls: { enabled: true, ca: /etc/taskbroker/ca.pem }
 *   fail-fast: true
 *   workers:
 *     mail: { queues: [emails], concurrency: 8, stop-timeout: 20s, labels: { region: eu } }
 * </pre>
 */
@ConfigurationProperties(prefix = "taskbroker")
public class TaskbrokerProperties {
  /** The broker's gRPC address, host:port. */
  private String address = "127.0.0.1:50051";

  /** Bearer token sent on every call (authorization: Bearer TOKEN); empty sends none. */
  private String token;

  /** TLS to the broker. */
  private final Tls tls = new Tls();

  /**
   * Stop a worker at once when its Lease fails for a reason retrying cannot fix (TLS handshake,
   * plaintext against TLS or the reverse, not a gRPC server, UNAUTHENTICATED, PERMISSION_DENIED)
   * instead of logging and retrying. Each worker may override it.
   */
  private boolean failFast = false;

  /** The workers' metrics. */
  private final Metrics metrics = new Metrics();

  /** The actuator's taskbroker health indicator. */
  private final Health health = new Health();

  /**
   * Run on an in-process fake broker (dev.taskbroker.client.testing.InMemoryBroker) instead of
   * connecting: a submit runs the @TaskHandler at once; no worker starts. For tests
   * (@InMemoryTaskbroker sets it).
   */
  private boolean inMemory = false;

  /** Whether to start workers for the application's @TaskHandler methods. */
  private boolean workersEnabled = true;

  /**
   * Keep the JVM running while workers run, with one non-daemon thread that ends when the
   * context closes (or every worker has stopped on its own): an application without a web
   * server does not exit after its start. False: something else must keep it alive.
   */
  private boolean keepAlive = true;

  /**
   * The workers, by name. Each takes the handlers of the queues it lists. With none configured,
   * one worker named "default" (default settings) runs every @TaskHandler.
   */
  private Map<String, WorkerProperties> workers = new LinkedHashMap<>();

  public String getAddress() {
    return address;
  }

  public void setAddress(String address) {
    this.address = address;
  }

  public String getToken() {
    return token;
  }

  public void setToken(String token) {
    this.token = token;
  }

  public Tls getTls() {
    return tls;
  }

  public boolean isKeepAlive() {
    return keepAlive;
  }

  public void setKeepAlive(boolean keepAlive) {
    this.keepAlive = keepAlive;
  }

  public boolean isFailFast() {
    return failFast;
  }

  public void setFailFast(boolean failFast) {
    this.failFast = failFast;
  }

  public Metrics getMetrics() {
    return metrics;
  }

  public Health getHealth() {
    return health;
  }

  public boolean isInMemory() {
    return inMemory;
  }

  public void setInMemory(boolean inMemory) {
    this.inMemory = inMemory;
  }

  public boolean isWorkersEnabled() {
    return workersEnabled;
  }

  public void setWorkersEnabled(boolean workersEnabled) {
    this.workersEnabled = workersEnabled;
  }

  public Map<String, WorkerProperties> getWorkers() {
    return workers;
  }

  public void setWorkers(Map<String, WorkerProperties> workers) {
    this.workers = workers;
  }

  /** Metrics settings. */
  public static class Metrics {
    /**
     * Record the workers' metrics (meter taskbroker) into the application's Micrometer
     * MeterRegistry, when it has one.
     */
    private boolean enabled = true;

    public boolean isEnabled() {
      return enabled;
    }

    public void setEnabled(boolean enabled) {
      this.enabled = enabled;
    }
  }

  /** Health indicator settings. */
  public static class Health {
    /** How long the broker's readiness check may take before the health is DOWN. */
    private Duration timeout = Duration.ofSeconds(2);

    public Duration getTimeout() {
      return timeout;
    }

    public void setTimeout(Duration timeout) {
      this.timeout = timeout;
    }
  }

  /** TLS settings; any file given turns TLS on. */
  public static class Tls {
    /** Use TLS; the JDK's trust store unless a CA file is given. */
    private boolean enabled = false;

    /** PEM file of the CA that signed the broker's certificate. */
    private String ca;

    /** PEM file of the client certificate (mTLS), with its key. */
    private String cert;

    /** PEM file (PKCS#8) of the client certificate's key. */
    private String key;

    public boolean isEnabled() {
      return enabled;
    }

    public void setEnabled(boolean enabled) {
      this.enabled = enabled;
    }

    public String getCa() {
      return ca;
    }

    public void setCa(String ca) {
      this.ca = ca;
    }

    public String getCert() {
      return cert;
    }

    public void setCert(String cert) {
      this.cert = cert;
    }

    public String getKey() {
      return key;
    }

    public void setKey(String key) {
      this.key = key;
    }

    /** Whether TLS is on: enabled, or a file named. */
    public boolean active() {
      return enabled || present(ca) || present(cert) || present(key);
    }
  }

  /** One worker: the queues whose handlers it runs and how. */
  public static class WorkerProperties {
    /**
     * Queues this worker leases from; each needs a @TaskHandler. Empty: every handler queue
     * that no other worker lists (at most one worker may leave it empty).
     */
    private List<String> queues = new ArrayList<>();

    /** Tasks run at once, 1 to 256. */
    private int concurrency = dev.taskbroker.client.Worker.DEFAULT_CONCURRENCY;

    /** Lease (and each heartbeat's extension) length, 1 s to 24 h. */
    private Duration leaseDuration = dev.taskbroker.client.Worker.DEFAULT_LEASE_DURATION;

    /** Long-poll wait of each Lease call, 0 to 60 s. */
    private Duration pollWait = dev.taskbroker.client.Worker.DEFAULT_POLL_WAIT;

    /**
     * How long running handlers may finish when the application stops before they are
     * interrupted and their tasks handed back. A stop takes at most this + stop-grace + 1 s:
     * the default 23 s fits Kubernetes' 30 s termination grace period.
     */
    private Duration stopTimeout = dev.taskbroker.client.Worker.DEFAULT_SHUTDOWN_STOP_TIMEOUT;

    /** How long interrupted handlers may take to return after the stop timeout. */
    private Duration stopGrace = dev.taskbroker.client.Worker.DEFAULT_STOP_GRACE;

    /** Shown in attempts and admin views; default hostname-pid. */
    private String workerId;

    /** Labels sent with every Lease: a task targeted at labels goes only to a worker carrying them all. */
    private Map<String, String> labels = new TreeMap<>();

    /** Overrides taskbroker.fail-fast for this worker. */
    private Boolean failFast;

    /** Whether Complete and Fail also lease the next task for the freed slot. */
    private boolean leaseNext = true;

    public List<String> getQueues() {
      return queues;
    }

    public void setQueues(List<String> queues) {
      this.queues = queues;
    }

    public int getConcurrency() {
      return concurrency;
    }

    public void setConcurrency(int concurrency) {
      this.concurrency = concurrency;
    }

    public Duration getLeaseDuration() {
      return leaseDuration;
    }

    public void setLeaseDuration(Duration leaseDuration) {
      this.leaseDuration = leaseDuration;
    }

    public Duration getPollWait() {
      return pollWait;
    }

    public void setPollWait(Duration pollWait) {
      this.pollWait = pollWait;
    }

    public Duration getStopTimeout() {
      return stopTimeout;
    }

    public void setStopTimeout(Duration stopTimeout) {
      this.stopTimeout = stopTimeout;
    }

    public Duration getStopGrace() {
      return stopGrace;
    }

    public void setStopGrace(Duration stopGrace) {
      this.stopGrace = stopGrace;
    }

    public String getWorkerId() {
      return workerId;
    }

    public void setWorkerId(String workerId) {
      this.workerId = workerId;
    }

    public Map<String, String> getLabels() {
      return labels;
    }

    public void setLabels(Map<String, String> labels) {
      this.labels = labels;
    }

    public Boolean getFailFast() {
      return failFast;
    }

    public void setFailFast(Boolean failFast) {
      this.failFast = failFast;
    }

    public boolean isLeaseNext() {
      return leaseNext;
    }

    public void setLeaseNext(boolean leaseNext) {
      this.leaseNext = leaseNext;
    }
  }

  static boolean present(String s) {
    return s != null && !s.isEmpty();
  }
}
