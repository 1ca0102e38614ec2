#!/bin/sh
# Launcher of an edgekit bundle: verifies every file against manifest.json, then starts
# `edgekit serve` (default) or `edgekit run` on this bundle with its runtime.toml.
#   ./run.sh                      serve on 127.0.0.1:8080
#   ./run.sh run --prompt "Hi"    one completion to stdout
set -eu
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
cmd=${1:-serve}
[ $# -gt 0 ] && shift
edgekit=${EDGEKIT:-edgekit}
"$edgekit" verify "$here"
exec "$edgekit" "$cmd" "$here" "$@"
