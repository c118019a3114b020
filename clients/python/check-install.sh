#!/usr/bin/env bash
# Installs the Python package from its published artifacts as docs/clients.md says: a clean copy
# of the committed tree (git archive HEAD, so nothing untracked or built in this checkout leaks
# in), `python -m build` there (the wheel and the sdist that `twine upload` sends to PyPI), then
# the wheel file alone into a fresh venv (`pip install taskbroker-X-py3-none-any.whl`, and again
# with the `otel` extra), running a five-line program that imports it, builds a Client and
# registers a typed handler, from outside the copy so only the installed package can be
# imported; and the sdist into a second fresh venv, imported the same way. Needs PyPI (build,
# setuptools, grpcio, protobuf). Ends with "install check: ok".
set -euo pipefail
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-python-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

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

python3 -m venv "$tmp/venv"
echo "== pip install $(basename "$wheel") (a fresh venv)"
"$tmp/venv/bin/pip" install -q "$wheel"
(cd "$tmp/app" && "$tmp/venv/bin/python" main.py)
echo "== pip install '$(basename "$wheel")[otel]'"
"$tmp/venv/bin/pip" install -q "$wheel[otel]"
(cd "$tmp/app" && "$tmp/venv/bin/python" -c 'import opentelemetry.metrics, taskbroker.metrics; taskbroker.metrics.WorkerMetrics().settle_call("Complete"); print("metrics through opentelemetry-api")')

python3 -m venv "$tmp/venv-sdist"
echo "== pip install $(basename "$sdist") (another fresh venv)"
"$tmp/venv-sdist/bin/pip" install -q "$sdist"
(cd "$tmp/app" && "$tmp/venv-sdist/bin/python" main.py)
echo "install check: ok"
