#!/usr/bin/env bash
# Regenerates taskbrokerv1/ from ../../proto with buf (from npm) and local protoc plugins.
#
# The generated code is committed, as Go users expect; run this after changing the .proto files.
# Needs Go and npm; fetches only from the Go module proxy and the npm registry.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

# Plugin versions: protoc-gen-go follows the protobuf runtime in go.mod, so the generated
# code always matches the library it compiles against.
protobuf_version="$(go list -m -f '{{.Version}}' google.golang.org/protobuf)"
grpc_gen_version="v1.6.2" # google.golang.org/grpc/cmd/protoc-gen-go-grpc
buf_version="1.75.0"      # @bufbuild/buf on npm

mkdir -p .bin
GOBIN="$here/.bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$protobuf_version"
GOBIN="$here/.bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$grpc_gen_version"

rm -f taskbrokerv1/*.pb.go
npx --yes "@bufbuild/buf@$buf_version" generate ../../proto --template buf.gen.yaml
gofmt -l taskbrokerv1 || true
echo "generated: $(ls taskbrokerv1)"
