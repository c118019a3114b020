#!/usr/bin/env bash
# Regenerates src/taskbroker/v1/ from ../../proto with grpcio-tools (which bundles protoc).
#
# The proto files live at taskbroker/v1/*.proto, so protoc's output already imports
# `from taskbroker.v1 import broker_pb2`: it fits this package without rewriting imports.
# The generated code is committed; run this after changing the .proto files. Type stubs come
# from mypy-protobuf: `_pb2.pyi` for the messages and `_pb2_grpc.pyi` for the gRPC stubs
# (sync and grpc.aio), so `mypy --strict` checks calls through Client.broker / .admin.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto="$here/../../proto"
out="$here/src"
python="${PYTHON:-python3}"
if ! "$python" -c 'import grpc_tools, mypy_protobuf' 2>/dev/null; then
  # Same venv as conformance.sh; created on first use.
  [ -x "$here/.venv/bin/python" ] || python3 -m venv "$here/.venv"
  "$here/.venv/bin/pip" install -q -r "$here/requirements-dev.txt"
  python="$here/.venv/bin/python"
fi

rm -f "$out"/taskbroker/v1/*_pb2*.py "$out"/taskbroker/v1/*_pb2*.pyi
"$python" -m grpc_tools.protoc \
  -I "$proto" \
  --plugin=protoc-gen-mypy="$(dirname "$python")/protoc-gen-mypy" \
  --plugin=protoc-gen-mypy_grpc="$(dirname "$python")/protoc-gen-mypy_grpc" \
  --python_out="$out" --mypy_out="$out" --grpc_python_out="$out" --mypy_grpc_out="$out" \
  "$proto"/taskbroker/v1/broker.proto "$proto"/taskbroker/v1/admin.proto \
  "$proto"/taskbroker/v1/schedule.proto "$proto"/taskbroker/v1/worker.proto "$proto"/taskbroker/v1/queue.proto \
  "$proto"/taskbroker/v1/event.proto
cat > "$out/taskbroker/v1/__init__.py" <<'PY'
"""Generated from proto/taskbroker/v1 by clients/python/generate.sh; do not edit."""
PY
echo "generated $(ls "$out"/taskbroker/v1/*_pb2*.py | wc -l) modules into $out/taskbroker/v1"
