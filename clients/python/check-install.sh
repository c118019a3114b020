#!/usr/bin/env bash
# Installs the Python package from its published artifacts as docs/clients.md says: a clean copy
# of the committed tree (git archive HEAD, so nothing untracked or built in this checkout leaks
# in), `python -m build` there (the wheel and the sdist that `twine upload` sends to PyPI), then
# the wheel file alone into a fresh venv (`pip install taskbroker-X-py3-none-any.whl`, and again
# with the `otel` extra), running a five-line program that imports it, builds a Client and
# registers a typed handler, from outside the copy so only the installed package can be
# imported; and the sdist into a second fresh venv, imported the same way. With each install,
# a worker (worker.py, `worker.run()` until SIGTERM) and a producer (producer.py: submits a task,
# waits for it and prints the worker's result) run against a broker started from the debug
# build on loopback with a fresh SQLite database (scripts/broker.sh; built here when missing).
# Needs PyPI (build, setuptools, grpcio, protobuf). Ends with "install check: ok".
set -euo pipefail
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-python-install.XXXXXX")"
. "$root/scripts/broker.sh"
trap 'stop_broker; rm -rf "$tmp"' EXIT

git -C "$root" archive HEAD clients/python | tar -x -C "$tmp"
echo "== python -m build (wheel and sdist, from the clean copy)"
python3 -m venv "$tmp/buildenv"
"$tmp/buildenv/bin/pip" install -q build
"$tmp/buildenv/bin/python" -m build -q --outdir "$tmp/dist" "$tmp/clients/python" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log" >&2; echo "install check: python -m build failed" >&2; exit 1; }
rm -rf "$tmp/clients"
wheel="$(ls "$tmp"/dist/taskbroker-*-py3-none-any.whl)"
sdist="$(ls "$tmp"/dist/taskbroker-*.tar.gz)"
echo "== built $(basename "$wheel") and $(basename "$sdist")"
files="$(python3 -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel")"
for f in taskbroker/__init__.py taskbroker/py.typed taskbroker/v1/broker_pb2.py taskbroker/v1/broker_pb2_grpc.py; do
  grep -qx "$f" <<<"$files" || { echo "$f is not in the wheel" >&2; exit 1; }
done

mkdir "$tmp/app"
cat >"$tmp/app/main.py" <<'PY'
import dataclasses, importlib.resources, taskbroker
@dataclasses.dataclass
class Email: to: str
worker = taskbroker.Worker(taskbroker.Client("127.0.0.1:50051"), concurrency=2)
worker.handle("emails", lambda email: {"sent": email.to}); assert importlib.resources.files("taskbroker").joinpath("py.typed").is_file()
print("imported", taskbroker.__file__, "queues", worker.queues, "payload", taskbroker.task_spec("emails", Email("ada@example.com")).payload)
PY
cat >"$tmp/app/worker.py" <<'PY'
import dataclasses, os, taskbroker
@dataclasses.dataclass
class Email: to: str
worker = taskbroker.Worker(taskbroker.Client(os.environ["TASKBROKER_ADDR"]))
@worker.handler("emails")
def send(email: Email) -> dict:
    return {"sent_to": email.to}
worker.run()  # until SIGTERM, then drains
PY
cat >"$tmp/app/producer.py" <<'PY'
import dataclasses, os, taskbroker
@dataclasses.dataclass
class Email: to: str
with taskbroker.Client(os.environ["TASKBROKER_ADDR"]) as tb:
    task_id = tb.submit("emails", Email(to="ada@example.com")).task_id
    task = tb.wait(task_id, timeout=60)
    print("result", tb.get_result(task, dict))
PY

echo "== a broker on loopback (target/debug/taskbroker, fresh SQLite)"
build_broker
: >"$tmp/stdout"
: >"$tmp/stderr"
start_broker 127.0.0.1:0 127.0.0.1:0
export TASKBROKER_ADDR="$addr"

# live VENV: worker.py in the background, producer.py until it read the worker's result back.
live() {
  (cd "$tmp/app" && exec "$1/bin/python" worker.py) &
  local worker=$! out
  out="$(cd "$tmp/app" && timeout 120 "$1/bin/python" producer.py)" || { kill "$worker"; echo "install check: the producer failed" >&2; return 1; }
  kill -TERM "$worker"
  wait "$worker" || { echo "install check: the worker did not stop cleanly on SIGTERM" >&2; return 1; }
  echo "$out"
  [ "$out" = "result {'sent_to': 'ada@example.com'}" ] || { echo "install check: unexpected producer output" >&2; return 1; }
  echo "worker and producer ran against $TASKBROKER_ADDR"
}

python3 -m venv "$tmp/venv"
echo "== pip install $(basename "$wheel") (a fresh venv)"
"$tmp/venv/bin/pip" install -q "$wheel"
(cd "$tmp/app" && "$tmp/venv/bin/python" main.py)
live "$tmp/venv"
echo "== pip install '$(basename "$wheel")[otel]'"
"$tmp/venv/bin/pip" install -q "$wheel[otel]"
(cd "$tmp/app" && "$tmp/venv/bin/python" -c 'import opentelemetry.metrics, taskbroker.metrics; taskbroker.metrics.WorkerMetrics().settle_call("Complete"); print("metrics through opentelemetry-api")')

python3 -m venv "$tmp/venv-sdist"
echo "== pip install $(basename "$sdist") (another fresh venv)"
"$tmp/venv-sdist/bin/pip" install -q "$sdist"
(cd "$tmp/app" && "$tmp/venv-sdist/bin/python" main.py)
live "$tmp/venv-sdist"
echo "install check: ok"
