#!/bin/sh
# The edgekit runtime for {{ arch }} boxes that this pack carries: installed from the wheels beside this script into
# a new virtual environment, with no compiler and no network; PREFIX/venv switches to it only when every step passed.
#   tar -xf PACK box-runtime && sh box-runtime/install.sh [PREFIX]        (PREFIX: /opt/edgekit; Python: $PYTHON, else
#                                                                 python{{ python }} on PATH)
# Then: PREFIX/venv/bin/edgekit install PACK. Exit codes are edgekit's: 2 a pack for another architecture, 3 no
# Python {{ python }} or no venv module, 4 a file of the runtime missing or changed, 5 pip failed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:-/opt/edgekit}
python=${PYTHON:-python{{ python }}}
fail() { echo "install-runtime: $2" >&2; echo "  fix: $3" >&2; exit "$1"; }

machine=$(uname -m)
[ "$machine" = "{{ arch }}" ] || fail 2 "this pack carries the runtime for {{ arch }} boxes; this box is $machine" \
  "pack the bundle for this box: edgekit pack BUNDLE --box $machine"
command -v "$python" >/dev/null 2>&1 || fail 3 "$python is not installed" \
  "install Python {{ python }} and its venv module (Debian bookworm: apt-get install python3 python3-venv)"
"$python" -c 'import sys; sys.exit(sys.version_info[:2] != ({{ python.replace(".", ", ") }}))' 2>/dev/null ||
  fail 3 "$python is not Python {{ python }}: the wheels are for {{ python }}" "install Python {{ python }} or set PYTHON"
"$python" -c 'import ensurepip, venv' 2>/dev/null || fail 3 "$python has no venv module" \
  "apt-get install python3-venv (Debian)"

"$python" - "$here" <<'VERIFY'
import hashlib, json, pathlib, sys
here = pathlib.Path(sys.argv[1])
def fail(what):
    print(f"install-runtime: {what}", file=sys.stderr)
    print("  fix: copy the whole pack to the box again (its sha256 is what edgekit pack printed)", file=sys.stderr)
    sys.exit(4)
listed = json.loads((here / "runtime.json").read_text(encoding="utf-8"))["files"]
for rel, sha256 in listed.items():
    path = here / rel
    if not path.is_file():
        fail(f"box-runtime/{rel} is missing")
    if hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
        fail(f"box-runtime/{rel} differs from box-runtime/runtime.json (a changed byte)")
extra = sorted(p.name for p in (here / "wheels").iterdir() if f"wheels/{p.name}" not in listed)
if extra:
    fail(f"box-runtime/wheels/{extra[0]} is not listed in box-runtime/runtime.json")
VERIFY

id=$(sha256sum "$here/runtime.json" | cut -c1-12)
venv="$prefix/runtime-$id"
if [ ! -f "$venv/.installed" ]; then
  rm -rf "$venv"
  mkdir -p "$prefix"
  "$python" -m venv "$venv" || fail 5 "$python -m venv $venv failed" "check free space and permissions in $prefix"
  "$venv/bin/python" -m pip install --quiet --no-index --disable-pip-version-check --find-links "$here/wheels" \
    '{{ requirement }}' || { rm -rf "$venv"; fail 5 "pip could not install {{ requirement }}" "read pip's message above"; }
  "$venv/bin/edgekit" --version >/dev/null || { rm -rf "$venv"; fail 5 "the installed edgekit does not start" \
    "read its message above"; }
  : >"$venv/.installed"
fi
ln -sfn "runtime-$id" "$prefix/venv.new"
mv -T "$prefix/venv.new" "$prefix/venv"
echo "installed: $("$prefix/venv/bin/edgekit" --version | head -n 1) in $prefix/venv (runtime-$id, {{ arch }})"
