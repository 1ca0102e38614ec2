#!/bin/sh
# Launcher of an edgekit bundle. Works from any directory:
#   ./run.sh                                   serve on 127.0.0.1:8080 (OpenAI-compatible API)
#   ./run.sh serve --host 0.0.0.0 --port 9000
#   ./run.sh run --prompt "Hi" [--chat]        one completion to stdout
#   ./run.sh bench | tune | verify | inspect | numa
# run/serve/bench/tune verify every file against manifest.json before loading the model, and read
# runtime.toml (threads, mmap, context, concurrency), overridden by runtime.local.toml if present.
# Trust: when the box has a trust policy (public keys in /etc/edgekit/trusted-keys/*.pub, or the folder
# EDGEKIT_TRUST_DIR names), they also check model.sig against it and refuse (exit 4) a bundle that is
# unsigned, signed by another key, or changed after signing, before the model is loaded.
# NUMA: when the runtime config's policy (decided on this box, see `edgekit numa`) binds the model
# to a node or interleaves it, the runtime is started under numactl with those arguments.
# Needs `edgekit` (pip install 'edgekit[runtime]'); set EDGEKIT=/path/to/edgekit to choose one.
set -eu
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
cmd=${1:-serve}
[ $# -gt 0 ] && shift

if [ -n "${EDGEKIT:-}" ]; then
  set -- "$EDGEKIT" "$cmd" "$here" "$@"
elif command -v edgekit >/dev/null 2>&1; then
  set -- edgekit "$cmd" "$here" "$@"
elif command -v python3 >/dev/null 2>&1 && python3 -c 'import edgekit' >/dev/null 2>&1; then
  set -- python3 -m edgekit "$cmd" "$here" "$@"
else
  echo "run.sh: edgekit is not installed: pip install 'edgekit[runtime]' (or set EDGEKIT=/path/to/edgekit)" >&2
  exit 3
fi

case "$cmd" in
  serve | run | bench | tune) ;;
  verify | inspect | numa) exec "$@" ;;
  *)
    echo "run.sh: unknown command '$cmd'; use serve, run, bench, tune, verify, inspect or numa" >&2
    exit 2
    ;;
esac

# Ask edgekit for the NUMA placement (on a box with several nodes it verifies the bundle before reading
# runtime.toml; on one node there is nothing to place and nothing is read).
if [ "$1" = python3 ]; then
  placement=$(python3 -m edgekit numa "$here" --numactl)
else
  placement=$("$1" numa "$here" --numactl)
fi
if [ -n "$placement" ]; then
  if command -v numactl >/dev/null 2>&1; then
    export EDGEKIT_NUMACTL=1
    # shellcheck disable=SC2086 # the placement is a list of numactl arguments
    exec $placement "$@"
  fi
  echo "run.sh: the NUMA policy asks for '$placement' but numactl is not installed; llama.cpp places the threads" >&2
fi
exec "$@"
