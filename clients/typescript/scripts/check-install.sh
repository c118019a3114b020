#!/usr/bin/env bash
# The install check lives at clients/typescript/check-install.sh (the same path in every client).
exec "$(dirname "$0")/../check-install.sh" "$@"
