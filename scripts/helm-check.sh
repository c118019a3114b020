#!/usr/bin/env bash
# Checks the Helm chart (helm/taskbroker) offline, with no cluster:
#   scripts/helm-check.sh
# - helm lint --strict in each mode (ci/sqlite-values.yaml, ci/postgres-values.yaml,
#   ci/mysql-values.yaml);
# - helm template in each mode, and once more with the Prometheus Operator API
#   (--api-versions monitoring.coreos.com/v1) so the ServiceMonitor renders;
# - values.schema.json and the chart's own checks reject contradictory values;
# - every rendered object validated against the Kubernetes OpenAPI schemas of the
#   oldest supported version and the newest known one (kubernetes-validate --strict);
#   the CRD kinds (ServiceMonitor, Linkerd and Istio policies, KEDA ScaledObjects) have
#   no schema there and are checked by assertions;
# - the mesh and scaling extras (ci/mesh-values.yaml) rendered with Linkerd policy and
#   with Istio policy: HTTP probes that both meshes pass, the NetworkPolicy a default
#   install ships, the helm test pod, KEDA ScaledObjects, Postgres over TLS;
# - assertions on the rendered manifests (mode rules, probes, ports, hooks), and that
#   the Dockerfile copies every workspace member (the image itself is not built here).
# Installs what is missing into ${XDG_CACHE_HOME:-~/.cache}/taskbroker: helm built from
# the Go module proxy (needs Go >= 1.26, GOTOOLCHAIN=local; about 5 minutes on 2 cores,
# once) and kubernetes-validate from PyPI in a venv.
# Prints `N passed, M failed` last; exits non-zero when a check failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

helm_version=v4.2.4
kv_version=1.37.0
# The chart's kubeVersion floor, and the newest schemas kubernetes-validate ships.
kube_versions=(1.30.0 1.37.0)
chart=helm/taskbroker

cache="${XDG_CACHE_HOME:-$HOME/.cache}/taskbroker"
bindir="$cache/bin"
venv="$cache/venv-helm"
mkdir -p "$bindir"

# --- tools -------------------------------------------------------------------
# `go install` leaves helm's version string short (no release ldflags), so a stamp file
# records which release the binary was built from.
helm="$bindir/helm"
if [ ! -x "$helm" ] || [ "$(cat "$helm.version" 2>/dev/null)" != "$helm_version" ]; then
  if ! command -v go >/dev/null 2>&1; then
    echo "helm-check: Go is needed to build helm $helm_version (go install); install Go >= 1.26" >&2
    exit 1
  fi
  echo "installing helm $helm_version into $bindir (go install; takes a few minutes once)"
  GOTOOLCHAIN=local GOBIN="$bindir" go install "helm.sh/helm/v4/cmd/helm@$helm_version" || {
    echo "helm-check: go install helm.sh/helm/v4/cmd/helm@$helm_version failed" >&2
    exit 1
  }
  echo "$helm_version" >"$helm.version"
fi
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$kv_version"; then
  echo "installing kubernetes-validate $kv_version into $venv"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q "kubernetes-validate==$kv_version" || {
    echo "helm-check: could not install kubernetes-validate from PyPI" >&2
    exit 1
  }
fi
py="$venv/bin/python"
echo "helm $helm_version ($helm), kubernetes-validate $kv_version"

# helm keeps its caches and config out of the user's real ones.
work="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-helm.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export HELM_CACHE_HOME="$work/helm-cache" HELM_CONFIG_HOME="$work/helm-config" HELM_DATA_HOME="$work/helm-data"

# --- checks ------------------------------------------------------------------
passed=0
failed=0
check() { # NAME COMMAND...: runs COMMAND, counts it, shows its output on failure
  local name="$1"
  shift
  if "$@" >"$work/out" 2>&1; then
    passed=$((passed + 1))
    echo "ok    $name"
  else
    failed=$((failed + 1))
    echo "FAIL  $name"
    sed 's/^/      /' "$work/out" | head -40
  fi
}
rejects() { # PATTERN ARGS...: helm template must fail, with an error matching PATTERN
  local pattern="$1"
  shift
  if render /dev/null "$@" 2>"$work/err"; then
    echo "rendered, but should have been rejected"
    return 1
  fi
  grep -E -q "$pattern" "$work/err" || { cat "$work/err"; return 1; }
}

render() { # OUTFILE ARGS...: helm template into OUTFILE
  local out="$1"
  shift
  "$helm" template tb "$chart" --namespace tasks --kube-version 1.30.0 "$@" >"$out"
}

# Evaluates a Python expression over the objects of a rendered file. Names in scope:
# objs (all), one(kind) (exactly one of that kind), kinds (kind -> list), and
# deploy / container (the Deployment and its broker container, when rendered).
assert() { # FILE EXPRESSION
  "$py" - "$1" "$2" <<'PY'
import sys, yaml
path, expr = sys.argv[1], sys.argv[2]
objs = [o for o in yaml.safe_load_all(open(path)) if o]
kinds = {}
for o in objs:
    kinds.setdefault(o["kind"], []).append(o)
def one(kind):
    found = kinds.get(kind, [])
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]
deploy = (kinds.get("Deployment") or [None])[0]
container = deploy["spec"]["template"]["spec"]["containers"][0] if deploy else None
def env(name):
    return next((e for e in container.get("env", []) if e["name"] == name), None)
ok = eval("(" + expr + ")")
if not ok:
    print(f"false: {expr}")
    sys.exit(1)
PY
}

assert_render() { # EXPRESSION ARGS...: renders with ARGS, then asserts EXPRESSION
  local expr="$1"
  shift
  render "$work/assert_render.yaml" "$@" && assert "$work/assert_render.yaml" "$expr"
}

validate() { # VERSION FILE: kubernetes-validate, leaving out kinds it has no schema for
  "$py" - "$2" "$work/validate.yaml" <<'PY'
import sys, yaml
objs = [o for o in yaml.safe_load_all(open(sys.argv[1])) if o]
crd_groups = ("monitoring.coreos.com/", "policy.linkerd.io/", "security.istio.io/", "keda.sh/")
keep = [o for o in objs if not o["apiVersion"].startswith(crd_groups)]
yaml.safe_dump_all(keep, open(sys.argv[2], "w"))
PY
  "$venv/bin/kubernetes-validate" -k "$1" --strict --quiet "$work/validate.yaml"
}

sq="$chart/ci/sqlite-values.yaml"
pg="$chart/ci/postgres-values.yaml"
my="$chart/ci/mysql-values.yaml"

check "helm lint --strict (sqlite)" "$helm" lint --strict "$chart" -f "$sq"
check "helm lint --strict (postgres)" "$helm" lint --strict "$chart" -f "$pg"
check "helm lint --strict (mysql)" "$helm" lint --strict "$chart" -f "$my"
mesh="$chart/ci/mesh-values.yaml"
check "helm lint --strict (mesh extras)" "$helm" lint --strict "$chart" -f "$mesh"
check "helm template (defaults)" render "$work/default.yaml"
check "helm template (sqlite)" render "$work/sqlite.yaml" -f "$sq"
check "helm template (postgres)" render "$work/postgres.yaml" -f "$pg"
check "helm template (mysql)" render "$work/mysql.yaml" -f "$my"
check "helm template (postgres, TLS, no HPA)" render "$work/tls.yaml" -f "$pg" \
  --set autoscaling.enabled=false --set tls.existingSecret=tb-tls --set tls.verifyClients=true
check "helm template (sqlite, monitoring.coreos.com/v1 served)" render "$work/sqlite-mon.yaml" \
  -f "$sq" --api-versions monitoring.coreos.com/v1
check "helm template (postgres, monitoring.coreos.com/v1 served)" render "$work/postgres-mon.yaml" \
  -f "$pg" --api-versions monitoring.coreos.com/v1
check "helm template (mesh extras, Linkerd policy)" render "$work/linkerd.yaml" -f "$mesh" \
  --set linkerd.policy.enabled=true
check "helm template (mesh extras, Istio policy)" render "$work/istio.yaml" -f "$mesh" \
  --set istio.policy.enabled=true --set-json 'podAnnotations={"sidecar.istio.io/inject":"true"}'
check "helm template (gRPC probes, TLS with client certificates)" render "$work/grpc-tls.yaml" \
  --set probes.type=grpc --set tls.existingSecret=tb-tls --set tls.verifyClients=true
check "helm template (TLS with client certificates for the test)" render "$work/mtls-test.yaml" \
  --set tls.existingSecret=tb-tls --set tls.verifyClients=true --set tests.clientCertSecret=tb-client

check "rejected: sqlite with replicaCount=3" rejects "/replicaCount': value must be 1" --set replicaCount=3
check "rejected: sqlite with autoscaling" rejects "/autoscaling/enabled': value must be false" \
  --set autoscaling.enabled=true
check "rejected: postgres without database Secret" rejects "/database/postgres/existingSecret'" \
  --set database.mode=postgres
check "rejected: mysql without database Secret" rejects "/database/mysql/existingSecret'" \
  --set database.mode=mysql
check "rejected: unknown database.mode" rejects "/database/mode': value must be one of" --set database.mode=oracle
check "rejected: unknown top-level value" rejects "additional properties 'replicas'" --set replicas=2
check "rejected: config key the chart owns" rejects "invalid propertyName 'listen'" --set config.listen=0.0.0.0:1
check "rejected: unknown probes.type" rejects "/probes/type': value must be one of" --set probes.type=exec
check "rejected: unknown Postgres sslMode" rejects "/sslMode': value must be one of" \
  --set database.postgres.tls.sslMode=on
check "rejected: ScaledObject without a queue" rejects "missing property 'queue'" \
  --set-json 'keda.scaledObjects=[{"name":"w"}]'
check "rejected without the schema too: sqlite with replicaCount=3" \
  rejects "sqlite runs exactly one replica" --skip-schema-validation --set replicaCount=3
check "rejected without the schema too: postgres without database Secret" \
  rejects "postgres needs database.postgres.existingSecret" --skip-schema-validation --set database.mode=postgres
check "rejected without the schema too: mysql without database Secret" \
  rejects "mysql needs database.mysql.existingSecret" --skip-schema-validation --set database.mode=mysql
check "NOTES render (sqlite install, client dry run)" \
  "$helm" install tb "$chart" --namespace tasks --dry-run=client -f "$sq"
check "NOTES render (postgres install, client dry run)" \
  "$helm" install tb "$chart" --namespace tasks --dry-run=client -f "$pg"
check "NOTES render (mysql install, client dry run)" \
  "$helm" install tb "$chart" --namespace tasks --dry-run=client -f "$my"

for v in "${kube_versions[@]}"; do
  for f in default sqlite postgres mysql tls sqlite-mon postgres-mon linkerd istio grpc-tls mtls-test; do
    check "kubernetes-validate --strict $v: $f" validate "$v" "$work/$f.yaml"
  done
done

s="$work/sqlite.yaml"
p="$work/postgres.yaml"
check "sqlite: replicas 1, strategy Recreate" assert "$s" \
  'deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"]["type"] == "Recreate"'
check "sqlite: no HPA, PDB or migration Job" assert "$s" \
  'not kinds.get("HorizontalPodAutoscaler") and not kinds.get("PodDisruptionBudget") and not kinds.get("Job")'
check "sqlite: PVC mounted at /data, URL sqlite:///data/taskbroker.db" assert "$s" \
  'one("PersistentVolumeClaim")["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
   and any(m["mountPath"] == "/data" for m in container["volumeMounts"])
   and env("TASKBROKER_DATABASE_URL")["value"] == "sqlite:///data/taskbroker.db"'
check "defaults: sqlite, one replica, insecure documented default" assert "$work/default.yaml" \
  'deploy["spec"]["replicas"] == 1 and env("TASKBROKER_INSECURE")["value"] == "true"'
check "postgres: RollingUpdate, replicas left to the HPA" assert "$p" \
  'deploy["spec"]["strategy"]["type"] == "RollingUpdate" and "replicas" not in deploy["spec"]'
check "postgres: HPA autoscaling/v2 on the Deployment" assert "$p" \
  'one("HorizontalPodAutoscaler")["apiVersion"] == "autoscaling/v2"
   and one("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["name"] == deploy["metadata"]["name"]'
check "postgres: PDB present" assert "$p" 'one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 1'
check "postgres: migration Job is a pre-install,pre-upgrade hook running migrate" assert "$p" \
  'one("Job")["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
   and one("Job")["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]'
check "postgres: migration Job stays out of the mesh (its sidecar would never exit)" assert "$p" \
  'one("Job")["spec"]["template"]["metadata"]["annotations"]["linkerd.io/inject"] == "disabled"'
check "postgres: database URL and tokens from existing Secrets" assert "$p" \
  'env("TASKBROKER_DATABASE_URL")["valueFrom"]["secretKeyRef"] == {"name": "taskbroker-db", "key": "database-url"}
   and env("TASKBROKER_AUTH_TOKENS_FILE")["value"] == "/etc/taskbroker/auth/tokens"
   and env("TASKBROKER_INSECURE") is None'
check "postgres, no HPA: replicas from replicaCount" assert "$work/tls.yaml" \
  'deploy["spec"]["replicas"] == 3 and not kinds.get("HorizontalPodAutoscaler")'
m="$work/mysql.yaml"
check "mysql: replicas from replicaCount, RollingUpdate, PDB, no PVC" assert "$m" \
  'deploy["spec"]["replicas"] == 2 and deploy["spec"]["strategy"]["type"] == "RollingUpdate"
   and one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
   and not kinds.get("PersistentVolumeClaim") and not kinds.get("HorizontalPodAutoscaler")'
check "mysql: database URL from its Secret, pool size passed, no Postgres TLS settings" assert "$m" \
  'env("TASKBROKER_DATABASE_URL")["valueFrom"]["secretKeyRef"] == {"name": "taskbroker-mysql", "key": "url"}
   and env("TASKBROKER_DB_MAX_CONNECTIONS")["value"] == "8"
   and env("PGSSLMODE") is None and env("PGSSLROOTCERT") is None'
check "mysql: migration Job runs migrate on the same URL" assert "$m" \
  '(j := one("Job"))["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
   and (c := j["spec"]["template"]["spec"]["containers"][0])["args"] == ["migrate"]
   and next(e for e in c["env"] if e["name"] == "TASKBROKER_DATABASE_URL")["valueFrom"]["secretKeyRef"]
       == {"name": "taskbroker-mysql", "key": "url"}'
check "mysql with autoscaling: HPA on the Deployment, replicas left to it" assert_render \
  'one("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["name"] == deploy["metadata"]["name"]
   and "replicas" not in deploy["spec"]' -f "$my" --set autoscaling.enabled=true
for f in sqlite postgres; do
  check "$f: Service port grpc with appProtocol grpc, and http-metrics" assert "$work/$f.yaml" \
    '[(q["name"], q.get("appProtocol")) for q in kinds["Service"][0]["spec"]["ports"]]
       == [("grpc", "grpc"), ("http-metrics", "http")]'
  check "$f: HTTP probes on the metrics port: /healthz (startup, liveness), /readyz" assert "$work/$f.yaml" \
    'container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
     and container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
     and container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
     and any(p["name"] == "http-metrics" for p in container["ports"])'
  check "$f: non-root, read-only root, no capabilities" assert "$work/$f.yaml" \
    'deploy["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
     and container["securityContext"]["readOnlyRootFilesystem"] is True
     and container["securityContext"]["capabilities"]["drop"] == ["ALL"]
     and container["resources"]["requests"]
     and deploy["spec"]["template"]["spec"]["enableServiceLinks"] is False'
  check "$f: preStop sleep, grace covers sleep + 60s long-poll + shutdown grace" assert "$work/$f.yaml" \
    'container["lifecycle"]["preStop"]["sleep"]["seconds"] == 5
     and deploy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 5 + 60 + 20'
  check "$f: config mounted and passed as TASKBROKER_CONFIG" assert "$work/$f.yaml" \
    'env("TASKBROKER_CONFIG")["value"] == "/etc/taskbroker/config/taskbroker.toml"
     and "listen = \"0.0.0.0:50051\"" in one("ConfigMap")["data"]["taskbroker.toml"]'
  check "$f: no ServiceMonitor without monitoring.coreos.com/v1" assert "$work/$f.yaml" \
    'not kinds.get("ServiceMonitor")'
  check "$f: ServiceMonitor with monitoring.coreos.com/v1" assert "$work/$f-mon.yaml" \
    'one("ServiceMonitor")["spec"]["endpoints"][0]["port"] == "http-metrics"'
done
check "TLS: cert, key and client CA passed; HTTP probes still (the metrics port is plain)" assert "$work/tls.yaml" \
  'env("TASKBROKER_TLS_CLIENT_CA")["value"] == "/etc/taskbroker/tls/ca.crt"
   and container["readinessProbe"]["httpGet"]["path"] == "/readyz"'
check "probes.type=grpc: native gRPC probes, TCP once TLS is on" assert "$work/grpc-tls.yaml" \
  '"tcpSocket" in container["readinessProbe"] and "httpGet" not in container["livenessProbe"]'
check "probes.type=grpc without TLS: gRPC probes with the readiness service" assert_render \
  'container["readinessProbe"]["grpc"] == {"port": 50051, "service": "readiness"}
   and container["livenessProbe"]["grpc"] == {"port": 50051}' --set probes.type=grpc

# --- NetworkPolicy, helm test, mesh policies, KEDA, Postgres TLS ---------------
d="$work/default.yaml"
check "default install ships a NetworkPolicy: gRPC from its namespace, metrics open" assert "$d" \
  '(np := one("NetworkPolicy"))["spec"]["podSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
   and np["spec"]["policyTypes"] == ["Ingress"]
   and np["spec"]["ingress"][0]["ports"] == [{"port": "grpc", "protocol": "TCP"}]
   and {"podSelector": {}} in np["spec"]["ingress"][0]["from"]
   and np["spec"]["ingress"][1]["ports"] == [{"port": "http-metrics", "protocol": "TCP"}]
   and "from" not in np["spec"]["ingress"][1]'
check "helm test pod: a test hook running taskbroker smoke against the Service" assert "$d" \
  '(t := one("Pod"))["metadata"]["annotations"]["helm.sh/hook"] == "test"
   and t["spec"]["containers"][0]["args"] == ["smoke", "--addr", "http://tb-taskbroker.tasks.svc:50051"]
   and t["spec"]["containers"][0]["image"] == container["image"]
   and t["spec"]["restartPolicy"] == "Never"
   and not set(deploy["spec"]["selector"]["matchLabels"].items()) <= set(t["metadata"]["labels"].items())
   and t["metadata"]["annotations"]["config.beta.linkerd.io/proxy-enable-native-sidecar"] == "true"'
check "helm test with auth: tokens from the auth Secret" assert "$p" \
  '"--tokens-file" in (t := one("Pod"))["spec"]["containers"][0]["args"]
   and t["spec"]["volumes"][0]["secret"]["secretName"] == "taskbroker-tokens"'
check "helm test with verifyClients but no client certificate: no test pod" assert "$work/tls.yaml" \
  'not kinds.get("Pod")'
check "helm test with mTLS: the client certificate Secret" assert "$work/mtls-test.yaml" \
  '(a := one("Pod")["spec"]["containers"][0]["args"])[2] == "https://tb-taskbroker.tasks.svc:50051"
   and a[a.index("--tls-ca") + 1] == "/etc/taskbroker/tls/ca.crt"
   and a[a.index("--tls-cert") + 1] == "/etc/taskbroker/client-tls/tls.crt"'
check "no mesh policy objects unless asked" assert "$d" \
  'not [o for o in objs if o["apiVersion"].split("/")[0] in ("policy.linkerd.io", "security.istio.io", "keda.sh")]'
l="$work/linkerd.yaml"
check "Linkerd: a Server per port (gRPC, HTTP/1), no HTTPRoute so probes stay authorized" assert "$l" \
  'sorted((s["metadata"]["name"], s["spec"]["port"], s["spec"]["proxyProtocol"]) for s in kinds["Server"])
     == [("tb-taskbroker-grpc", "grpc", "gRPC"), ("tb-taskbroker-metrics", "http-metrics", "HTTP/1")]
   and all(s["apiVersion"] == "policy.linkerd.io/v1beta3"
           and s["spec"]["podSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"] for s in kinds["Server"])
   and not kinds.get("HTTPRoute") and not kinds.get("GRPCRoute")'
check "Linkerd: gRPC admits the listed identities, the test pod and KEDA, metrics the scrape networks" assert "$l" \
  '{a["spec"]["targetRef"]["name"]: a["spec"]["requiredAuthenticationRefs"][0]["kind"] for a in kinds["AuthorizationPolicy"]}
     == {"tb-taskbroker-grpc": "MeshTLSAuthentication", "tb-taskbroker-metrics": "NetworkAuthentication"}
   and one("MeshTLSAuthentication")["spec"]["identityRefs"] == [
     {"kind": "ServiceAccount", "name": "emails-worker", "namespace": "workers"},
     {"kind": "ServiceAccount", "name": "tb-taskbroker", "namespace": "tasks"},
     {"kind": "ServiceAccount", "name": "keda-operator", "namespace": "keda"}]
   and [n["cidr"] for n in one("NetworkAuthentication")["spec"]["networks"]] == ["0.0.0.0/0", "::/0"]
   and container["readinessProbe"]["httpGet"]["port"] == "http-metrics"'
i="$work/istio.yaml"
check "Istio: STRICT mTLS, metrics port PERMISSIVE for an unmeshed Prometheus" assert "$i" \
  '(pa := one("PeerAuthentication"))["apiVersion"] == "security.istio.io/v1"
   and pa["spec"]["mtls"] == {"mode": "STRICT"} and pa["spec"]["portLevelMtls"] == {"9090": {"mode": "PERMISSIVE"}}
   and pa["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]'
check "Istio: ALLOW gRPC from the listed namespaces, the test pod and KEDA, metrics from anyone" assert "$i" \
  '(r := one("AuthorizationPolicy")["spec"]["rules"])[0]["to"] == [{"operation": {"ports": ["50051"]}}]
   and r[0]["from"] == [{"source": {"namespaces": ["workers"]}},
                        {"source": {"principals": ["cluster.local/ns/tasks/sa/tb-taskbroker",
                                                   "cluster.local/ns/keda/sa/keda-operator"]}}]
   and r[1] == {"to": [{"operation": {"ports": ["9090"]}}]}
   and one("AuthorizationPolicy")["spec"]["action"] == "ALLOW"'
check "NetworkPolicy: listed peers and KEDA only, metrics from monitoring" assert "$l" \
  '(np := one("NetworkPolicy"))["spec"]["ingress"][0]["from"][1:] == [
     {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}},
     {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "workers"}}}]
   and {"podSelector": {}} not in np["spec"]["ingress"][0]["from"]
   and np["spec"]["ingress"][1]["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]'
check "KEDA: ScaledObjects on the broker's external scaler, metadata as strings" assert "$l" \
  '[(s["metadata"]["namespace"], s["spec"]["scaleTargetRef"]["name"], s["spec"]["minReplicaCount"], s["spec"]["maxReplicaCount"],
     s["spec"]["triggers"][0]["type"]) for s in kinds["ScaledObject"]]
     == [("workers", "emails-worker", 0, 20, "external"), ("workers", "reports", 1, 10, "external-push")]
   and kinds["ScaledObject"][0]["spec"]["triggers"][0]["metadata"] == {
     "scalerAddress": "tb-taskbroker.tasks.svc:50051", "queue": "emails", "targetReadyPerReplica": "5",
     "activationReady": "0", "tokenFromEnv": "TASKBROKER_TOKEN"}
   and kinds["ScaledObject"][1]["spec"]["triggers"][0]["metadata"]["includeLeased"] == "false"
   and all(isinstance(v, str) for s in kinds["ScaledObject"] for v in s["spec"]["triggers"][0]["metadata"].values())'
check "Postgres TLS: PGSSLMODE and PGSSLROOTCERT from the CA Secret, in pods and the migration Job" assert "$l" \
  'env("PGSSLMODE")["value"] == "verify-full"
   and env("PGSSLROOTCERT")["value"] == "/etc/taskbroker/postgres-ca/ca.crt"
   and {"name": "postgres-ca", "mountPath": "/etc/taskbroker/postgres-ca", "readOnly": True} in container["volumeMounts"]
   and any(v["name"] == "postgres-ca" and v["secret"]["secretName"] == "taskbroker-db-ca"
           and v["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}] for v in deploy["spec"]["template"]["spec"]["volumes"])
   and (j := one("Job")["spec"]["template"]["spec"])["containers"][0]["env"][1]["name"] == "PGSSLMODE"
   and any(m["name"] == "postgres-ca" for m in j["containers"][0]["volumeMounts"])
   and any(v["name"] == "postgres-ca" for v in j["volumes"])'
check "no Postgres TLS settings unless asked" assert "$p" 'env("PGSSLMODE") is None and env("PGSSLROOTCERT") is None'
check "config TOML parses, with whole numbers as integers and [queues.NAME] tables" "$py" -c '
import sys, tomllib, yaml
for f in sys.argv[1:]:
    cm = next(o for o in yaml.safe_load_all(open(f)) if o and o["kind"] == "ConfigMap")
    t = tomllib.loads(cm["data"]["taskbroker.toml"])
    assert t["shutdown_grace"] == "20s", t
    assert isinstance(t["retry"]["max_attempts"], int), t
    if f == sys.argv[1]:
        q = t["queues"]
        assert q["emails"]["rate_limit"] == {"per_second": 20, "burst": 10}, q
        assert q["orders.eu"]["bucket"] == "partner-api", q
        assert q["orders.eu"]["payload_schema"].startswith("{\"type\": \"object\""), q
    open(f + ".toml", "w").write(cm["data"]["taskbroker.toml"])
' "$s" "$p"
# --- the outbox relay (relay.enabled) ------------------------------------------
# r / rc / renv: the relay Deployment, its container and its env by name.
relay_assert='(r := next(d for d in kinds["Deployment"] if d["metadata"]["name"].endswith("-relay")))
  and (rc := r["spec"]["template"]["spec"]["containers"][0])
  and (renv := {e["name"]: e for e in rc["env"]})'
check "helm template (relay on, postgres with auth)" render "$work/relay.yaml" -f "$pg" \
  --set relay.enabled=true --set relay.source.existingSecret=orders-db \
  --set relay.token.existingSecret=relay-token --set relay.initSchema=true
check "helm template (relay on, broker TLS with client certificates)" render "$work/relay-tls.yaml" \
  --set relay.enabled=true --set relay.source.existingSecret=orders-db --set relay.source.caSecret=orders-ca \
  --set tls.existingSecret=tb-tls --set tls.verifyClients=true --set relay.clientCertSecret=relay-client
for v in "${kube_versions[@]}"; do
  for f in relay relay-tls; do
    check "kubernetes-validate --strict $v: $f" validate "$v" "$work/$f.yaml"
  done
done
check "relay: a Deployment running taskbroker relay against the Service, source and token from Secrets" \
  assert "$work/relay.yaml" "$relay_assert"'
  and rc["args"][:2] == ["relay", "--init-schema"]
  and renv["TASKBROKER_RELAY_SOURCE"]["valueFrom"]["secretKeyRef"] == {"name": "orders-db", "key": "source-url"}
  and renv["TASKBROKER_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "relay-token", "key": "token"}
  and renv["TASKBROKER_ADDR"]["value"] == "http://tb-taskbroker.tasks.svc:50051"
  and rc["securityContext"]["readOnlyRootFilesystem"] is True
  and r["spec"]["replicas"] == 1
  and rc["args"][rc["args"].index("--metrics-listen") + 1] == "0.0.0.0:9090"
  and rc["ports"] == [{"name": "http-metrics", "containerPort": 9090, "protocol": "TCP"}]'
check "relay: TLS to the broker with its CA and a client certificate; source CA as PGSSLROOTCERT" \
  assert "$work/relay-tls.yaml" "$relay_assert"'
  and renv["TASKBROKER_ADDR"]["value"].startswith("https://")
  and renv["TASKBROKER_CA"]["value"] == "/etc/taskbroker/tls/ca.crt"
  and renv["TASKBROKER_CLIENT_CERT"]["value"] == "/etc/taskbroker/client-tls/tls.crt"
  and renv["PGSSLROOTCERT"]["value"] == "/etc/taskbroker/source-ca/ca.crt"
  and "--init-schema" not in rc["args"]'
check "relay: its pods are not the Service's; the NetworkPolicy admits them on the gRPC port" \
  assert "$work/relay-tls.yaml" "$relay_assert"'
  and (b := next(d for d in kinds["Deployment"] if not d["metadata"]["name"].endswith("-relay")))
  and not set(b["spec"]["selector"]["matchLabels"].items()) <= set(r["spec"]["template"]["metadata"]["labels"].items())
  and {"podSelector": {"matchLabels": r["spec"]["selector"]["matchLabels"]}}
      in one("NetworkPolicy")["spec"]["ingress"][0]["from"]'
check "relay off by default: no relay Deployment" assert "$work/default.yaml" 'len(kinds["Deployment"]) == 1'
check "rejected: relay without a source Secret" rejects "/relay/source/existingSecret'" --set relay.enabled=true
check "rejected without the schema too: relay without a source Secret" \
  rejects "relay.enabled needs relay.source.existingSecret" --skip-schema-validation --set relay.enabled=true
check "rejected: relay with verifyClients but no client certificate" rejects "relay.enabled with tls.verifyClients" \
  --set relay.enabled=true --set relay.source.existingSecret=s --set tls.existingSecret=t --set tls.verifyClients=true
check "rejected: relay batchSize over 1000" rejects "/relay/batchSize" \
  --set relay.enabled=true --set relay.source.existingSecret=s --set relay.batchSize=5000

# The broker itself accepts the rendered configuration (unknown keys or bad values
# would stop the pod at start).
if cargo build -q -p taskbroker-server --bin taskbroker; then
  for f in "$s" "$p"; do
    check "the broker accepts the config rendered by $(basename "$f")" \
      env TASKBROKER_INSECURE=true target/debug/taskbroker config print --config "$f.toml"
  done
else
  check "the broker builds to validate the rendered config" false
fi
check "Dockerfile and .dockerignore carry every workspace member the build reads" "$py" -c '
import re, tomllib
members = tomllib.load(open("Cargo.toml", "rb"))["workspace"]["members"]
docker = open("Dockerfile").read()
ignore = open(".dockerignore").read().split()
for path in members + ["proto", "migrations"]:
    assert re.search(rf"^COPY {path} {path}$", docker, re.M), f"Dockerfile does not COPY {path}"
    assert f"!{path}/" in ignore, f".dockerignore does not let {path}/ through"
for line in ["USER 10001:10001", "EXPOSE 50051 9090", "CMD [\"serve\"]",
             "ENTRYPOINT [\"/usr/local/bin/taskbroker\"]"]:
    assert line in docker, f"Dockerfile lacks {line}"
'

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
