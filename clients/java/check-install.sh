#!/usr/bin/env bash
# Installs the Java artifacts as docs/clients.md says, from a clean copy of the committed tree
# (`git archive HEAD`: nothing untracked or built here leaks in), and uses them from fresh
# projects outside that copy:
#
# 1. One `mvn install` in clients/ (the reactor of clients/java, the BOM clients/java-bom and the
#    Spring Boot starter clients/java-spring) into a local repository of its own, empty of any
#    dev.taskbroker artifact, so the projects below see only what this install put there, as
#    they would see the published artifacts.
# 2. A plain Maven project that imports dev.taskbroker:taskbroker-bom, depends on
#    taskbroker-client without a version, and compiles and runs a five-line program that submits
#    nothing and builds a Client and a Worker; then its worker (app.WorkerMain: `run()` until
#    SIGTERM) and producer (app.ProducerMain: submits a task, waits for it and prints the
#    worker's result and the task's state) against a broker started from the debug build on
#    loopback with a fresh SQLite database (scripts/broker.sh; built here when missing).
# 3. A Spring Boot 3.x application (spring-boot-starter-parent, the BOM imported, the starter
#    without a version, no other override: Spring Boot's own OpenTelemetry API) with one
#    @TaskHandler bean, started with its worker and closed.
# Ends with "install check: ok".
#
# The local repository starts as a hard-linked copy of ~/.m2/repository (less dev/taskbroker),
# so libraries already downloaded are not downloaded again; the rest comes from Maven Central.
# MAVEN_ARGS is passed to every mvn.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-java-install.XXXXXX")"
. "$root/scripts/broker.sh"
trap 'stop_broker; rm -rf "$tmp"' EXIT
log="$tmp/mvn.log"
repo="$tmp/m2"
if [ -d "$HOME/.m2/repository" ] && cp -al "$HOME/.m2/repository" "$repo" 2>/dev/null; then
  rm -rf "$repo/dev/taskbroker"
else
  rm -rf "$repo"
  mkdir -p "$repo"
fi
mvn=(mvn -B -ntp -Dstyle.color=never "-Dmaven.repo.local=$repo" ${MAVEN_ARGS:-})

echo "== a clean copy of $(git -C "$root" rev-parse --short HEAD)"
mkdir "$tmp/src"
git -C "$root" archive HEAD proto clients/pom.xml clients/java clients/java-bom clients/java-spring | tar -x -C "$tmp/src"

echo "== mvn install in clients/ (tests skipped: conformance.sh and java-spring/test.sh run them)"
if ! (cd "$tmp/src/clients" && "${mvn[@]}" -DskipTests install) >"$log" 2>&1; then
  cat "$log" >&2
  echo "install check: mvn install failed" >&2
  exit 1
fi
# The project's own version: the first <version> after its artifactId.
version="$(sed -n '/<artifactId>taskbroker-bom<\/artifactId>/,/<version>/s|.*<version>\(.*\)</version>.*|\1|p' \
  "$tmp/src/clients/java-bom/pom.xml" | head -n 1)"
boot="$(sed -n 's|.*<spring-boot.version>\(.*\)</spring-boot.version>.*|\1|p' "$tmp/src/clients/java-spring/pom.xml")"
for a in taskbroker-bom/$version/taskbroker-bom-$version.pom \
  taskbroker-client/$version/taskbroker-client-$version.jar \
  taskbroker-spring-parent/$version/taskbroker-spring-parent-$version.pom \
  taskbroker-spring-boot-starter/$version/taskbroker-spring-boot-starter-$version.jar; do
  [ -f "$repo/dev/taskbroker/$a" ] || { echo "install check: $a was not installed" >&2; exit 1; }
done
rm -rf "$tmp/src"

plugins='<plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-compiler-plugin</artifactId>
        <version>3.13.0</version>
      </plugin>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.8.1</version>
      </plugin>
    </plugins>'
bom="<dependency>
        <groupId>dev.taskbroker</groupId>
        <artifactId>taskbroker-bom</artifactId>
        <version>$version</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>"

# run DIR MAIN: build the project in DIR and run MAIN with its runtime classpath.
run() {
  if ! (cd "$1" && "${mvn[@]}" -q package dependency:build-classpath -Dmdep.outputFile=cp.txt) >"$log" 2>&1; then
    cat "$log" >&2
    echo "install check: the fresh project in $1 did not build" >&2
    return 1
  fi
  (cd "$1" && java -cp "target/classes:$(cat cp.txt)" "$2")
}

echo "== a fresh Maven project: taskbroker-bom $version imported, taskbroker-client"
app="$tmp/app"
mkdir -p "$app/src/main/java/app"
cat >"$app/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>app</groupId>
  <artifactId>install-check</artifactId>
  <version>1</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencyManagement>
    <dependencies>
      $bom
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>dev.taskbroker</groupId>
      <artifactId>taskbroker-client</artifactId>
    </dependency>
  </dependencies>
  <build>
    $plugins
  </build>
</project>
POM
cat >"$app/src/main/java/app/Main.java" <<'JAVA'
package app;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;

public class Main {
  record Email(String to) {}

  public static void main(String[] args) {
    try (Taskbroker tb = Taskbroker.connect("127.0.0.1:1")) {
      Worker w = Worker.builder(tb).handle("emails", Email.class, (task, email) -> email.to()).build();
      System.out.println("built a worker for " + w.queues() + "; payload " + new String(tb.spec("emails", new Email("a@example.com")).getPayload().toByteArray()));
      w.close();
    }
  }
}
JAVA
cat >"$app/src/main/java/app/WorkerMain.java" <<'JAVA'
package app;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.client.Worker;
import java.util.Map;

public class WorkerMain {
  record Email(String to) {}

  public static void main(String[] args) {
    try (Taskbroker tb = Taskbroker.connect(System.getenv("TASKBROKER_ADDR"));
        Worker w = Worker.builder(tb).handle("emails", Email.class, (task, email) -> Map.of("sentTo", email.to())).build()) {
      w.stopOnShutdown();
      w.run(); // until SIGTERM, then drains
    }
  }
}
JAVA
cat >"$app/src/main/java/app/ProducerMain.java" <<'JAVA'
package app;

import dev.taskbroker.client.Taskbroker;
import dev.taskbroker.v1.Task;
import java.time.Duration;
import java.util.Map;

public class ProducerMain {
  record Email(String to) {}

  public static void main(String[] args) {
    try (Taskbroker tb = Taskbroker.connect(System.getenv("TASKBROKER_ADDR"))) {
      String id = tb.submit("emails", new Email("ada@example.com")).getTaskId();
      Task task = tb.waitFor(id, Duration.ofSeconds(60));
      System.out.println("result " + tb.result(task, Map.class).get("sentTo") + " " + tb.getTask(id).state());
    }
  }
}
JAVA
out="$(run "$app" app.Main)"
echo "$out"
[ "$out" = 'built a worker for [emails]; payload {"to":"a@example.com"}' ] || {
  echo "install check: unexpected output" >&2
  exit 1
}

echo "== its worker and producer against a broker on loopback (target/debug/taskbroker, fresh SQLite)"
build_broker
: >"$tmp/stdout"
: >"$tmp/stderr"
start_broker 127.0.0.1:0 127.0.0.1:0
export TASKBROKER_ADDR="$addr"
(cd "$app" && exec java -cp "target/classes:$(cat cp.txt)" app.WorkerMain) &
worker=$!
out="$(cd "$app" && timeout 120 java -cp "target/classes:$(cat cp.txt)" app.ProducerMain)" ||
  { kill "$worker"; echo "install check: the producer failed" >&2; exit 1; }
kill -TERM "$worker"
# A JVM ended by SIGTERM exits 143 once its shutdown hooks (the worker's drain) have run.
wait "$worker" && status=0 || status=$?
[ "$status" -eq 0 ] || [ "$status" -eq 143 ] || { echo "install check: the worker exited $status on SIGTERM" >&2; exit 1; }
echo "$out"
[ "$out" = "result ada@example.com SUCCEEDED" ] || { echo "install check: unexpected producer output" >&2; exit 1; }
echo "worker and producer ran against $TASKBROKER_ADDR"
stop_broker

echo "== a fresh Spring Boot $boot application: taskbroker-bom imported, the starter, no override"
spring="$tmp/spring-app"
mkdir -p "$spring/src/main/java/app"
cat >"$spring/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <parent>
    <groupId>org.springframework.boot</groupId>
    <artifactId>spring-boot-starter-parent</artifactId>
    <version>$boot</version>
    <relativePath/>
  </parent>
  <groupId>app</groupId>
  <artifactId>install-check-spring</artifactId>
  <version>1</version>
  <properties>
    <java.version>17</java.version>
  </properties>
  <dependencyManagement>
    <dependencies>
      $bom
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>dev.taskbroker</groupId>
      <artifactId>taskbroker-spring-boot-starter</artifactId>
    </dependency>
  </dependencies>
  <build>
    $plugins
  </build>
</project>
POM
cat >"$spring/src/main/java/app/App.java" <<'JAVA'
package app;

import dev.taskbroker.spring.TaskHandler;
import dev.taskbroker.spring.TaskbrokerWorkers;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.stereotype.Component;

@SpringBootApplication
public class App {
  public record Email(String to) {}

  @Component
  public static class Mailer {
    @TaskHandler(queue = "emails")
    public String send(Email email) {
      return "sent to " + email.to();
    }
  }

  public static void main(String[] args) throws Exception {
    try (ConfigurableApplicationContext ctx = SpringApplication.run(App.class,
        "--taskbroker.address=127.0.0.1:1", "--taskbroker.keep-alive=false",
        "--spring.main.banner-mode=off", "--logging.level.root=ERROR")) {
      TaskbrokerWorkers workers = ctx.getBean(TaskbrokerWorkers.class);
      String api = io.opentelemetry.api.OpenTelemetry.class.getProtectionDomain().getCodeSource().getLocation().getPath();
      System.out.println("spring workers " + workers.workers().keySet() + " on "
          + workers.workers().values().iterator().next().queues() + ", running " + workers.isRunning()
          + ", " + api.substring(api.lastIndexOf('/') + 1));
    }
  }
}
JAVA
out="$(run "$spring" app.App)"
echo "$out"
[[ "$out" =~ ^'spring workers [default] on [emails], running true, opentelemetry-api-'[0-9.]+'.jar'$ ]] || {
  echo "install check: unexpected output from the Spring Boot application" >&2
  exit 1
}
echo "install check: ok"
