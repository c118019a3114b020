#!/usr/bin/env bash
# Installs the Java client as docs/clients.md says, from a clean copy of the committed tree
# (`git archive HEAD`: nothing untracked or built here leaks in): `mvn install` of
# clients/java (the proto files come from ../../proto of the same copy), then a fresh Maven
# project that depends on dev.taskbroker:taskbroker-client compiles and runs a five-line
# program that submits nothing and builds a Client and a Worker. Ends with "install check: ok".
#
# Maven installs into your local repository (~/.m2, or -Dmaven.repo.local through
# MAVEN_ARGS), as `mvn install` in clients/java does; the libraries come from Maven Central.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-java-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
log="$tmp/mvn.log"
mvn=(mvn -B -ntp -Dstyle.color=never ${MAVEN_ARGS:-})

echo "== a clean copy of $(git -C "$root" rev-parse --short HEAD)"
mkdir "$tmp/src"
git -C "$root" archive HEAD proto clients/java | tar -x -C "$tmp/src"

echo "== mvn install (clients/java, tests skipped: conformance.sh runs them)"
if ! (cd "$tmp/src/clients/java" && "${mvn[@]}" -DskipTests install) >"$log" 2>&1; then
  cat "$log" >&2
  echo "install check: mvn install failed" >&2
  exit 1
fi
# The project's own version: the first <version> after its artifactId.
version="$(sed -n '/<artifactId>taskbroker-client<\/artifactId>/,/<version>/s|.*<version>\(.*\)</version>.*|\1|p' \
  "$tmp/src/clients/java/pom.xml" | head -n 1)"

echo "== a fresh Maven project depending on dev.taskbroker:taskbroker-client:$version"
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
  <dependencies>
    <dependency>
      <groupId>dev.taskbroker</groupId>
      <artifactId>taskbroker-client</artifactId>
      <version>$version</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
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
    </plugins>
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
if ! (cd "$app" && "${mvn[@]}" -q package dependency:build-classpath -Dmdep.outputFile=cp.txt) >"$log" 2>&1; then
  cat "$log" >&2
  echo "install check: the fresh project did not build" >&2
  exit 1
fi
out="$(cd "$app" && java -cp "target/classes:$(cat cp.txt)" app.Main)"
echo "$out"
[ "$out" = 'built a worker for [emails]; payload {"to":"a@example.com"}' ] || {
  echo "install check: unexpected output" >&2
  exit 1
}
echo "install check: ok"
