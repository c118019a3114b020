#!/usr/bin/env bash
# Installs the Python package from a clean copy of the committed tree (git archive HEAD, so
# nothing untracked or built in this checkout leaks in) exactly as docs/clients.md says
# (`pip install ./clients/python` into a fresh venv, then again with the `otel` extra), and
# runs a five-line program that imports it, builds a Client and registers a typed handler,
# from outside the copy so only the installed package can be imported. Needs PyPI (grpcio,
# protobuf). Ends with "install check: ok".
set -euo pipefail
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-python-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

git -C "$root" archive HEAD clients/python | tar -x -C "$tmp"
mkdir "$tmp/app"
cat >"$tmp/app/main.py" <<'EOF'
import dataclasses, importlib.resources, taskbroker
@dataclasses.dataclass
class Email: to: str
worker = taskbroker.Worker(taskbroker.Client("127.0.0.1:50051"), concurrency=2)
worker.handle("emails", lambda email: {"sent": email.to}); assert importlib.resources.files("taskbroker").joinpath("py.typed").is_file()
print("imported", taskbroker.__file__, "queues", worker.queues, "payload", taskbroker.task_spec("emails", Email("ada@example.com")).payload)
EOF

python3 -m venv "$tmp/venv"
echo "== pip install ./clients/python (a fresh venv)"
"$tmp/venv/bin/pip" install -q "$tmp/clients/python"
(cd "$tmp/app" && "$tmp/venv/bin/python" main.py)
echo "== pip install './clients/python[otel]'"
"$tmp/venv/bin/pip" install -q "$tmp/clients/python[otel]"
(cd "$tmp/app" && "$tmp/venv/bin/python" -c 'import opentelemetry.metrics, taskbroker.metrics; taskbroker.metrics.WorkerMetrics().settle_call("Complete"); print("metrics through opentelemetry-api")')
echo "install check: ok"
