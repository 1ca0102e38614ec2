#!/usr/bin/env bash
# The whole box flow on an emulated ARM64 box (Debian bookworm arm64 through qemu-user-static), as a box runs it:
#   scripts/arm64-box.sh --key fleet.pub PACK [PACK...] [--refuse BAD_PACK]... [--keep]
# PACKs are `edgekit pack BUNDLE --box aarch64` packs of increasing releases; the first one's box runtime is installed
# (no compiler, no network), then each is installed with the trust policy (fleet.pub), and the box runs a prompt,
# answers one /v1/chat/completions request on loopback, shows its status and rolls back. A --refuse pack (a swapped
# model file, another architecture) must be refused with the current release kept. Prints one verdict per step;
# exits with the first failing step's code. Speed here is emulated: it says nothing about a real ARM box.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
key="" keep=0 packs=() refused=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --key) key=$2; shift 2 ;;
    --refuse) refused+=("$2"); shift 2 ;;
    --keep) keep=1; shift ;;
    -*) echo "arm64-box: unknown option $1" >&2; exit 2 ;;
    *) packs+=("$1"); shift ;;
  esac
done
[[ -n $key && ${#packs[@]} -gt 0 ]] || { sed -n 3p "$0" | sed 's/^# */usage: /' >&2; exit 2; }

pristine=$("$here/arm64-root.sh")
work=$(mktemp -d /var/tmp/edgekit-arm64-box.XXXXXX)
box=$work/root
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  if [[ $keep == 1 ]]; then echo "arm64-box: kept the box in $box" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
cp -a "$pristine" "$box"
for fs in proc sys dev; do mount --rbind "/$fs" "$box/$fs" && mounted+=("$box/$fs"); done

steps=0 last=$SECONDS
verdict() {  # one line per step: its name, ok or FAIL, what it found, and its wall time (emulated: not a box's speed)
  steps=$((steps + 1))
  printf 'arm64-box: %-10s %-4s %s (%d s)\n' "$1" "$2" "$3" $((SECONDS - last))
  last=$SECONDS
}
fail() { verdict "$1" FAIL "$2"; [[ -f $work/log ]] && tail -n 25 "$work/log" | sed 's/^/    /'; exit "${3:-1}"; }
# Inside the box: a clean environment (nothing of this machine's pip or Python settings), the trust policy's folder.
inbox() {
  chroot "$box" /usr/bin/env -i PATH=/opt/edgekit/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    EDGEKIT_TRUST_DIR=/etc/edgekit/trusted-keys "$@"
}

machine=$(inbox uname -m)
[[ $machine == aarch64 ]] || fail machine "uname -m says $machine"
verdict machine ok "uname -m: $machine ($(inbox /usr/bin/python3.11 -c 'import platform; print(platform.platform())'))"
for cc in gcc cc g++ clang; do
  ! inbox sh -c "command -v $cc" >/dev/null || fail compiler "the box has a compiler ($cc): it must not need one"
done
verdict compiler ok "none on the box (gcc, cc, g++, clang)"

mkdir -p "$box/root/packs" "$box/etc/edgekit/trusted-keys"
cp "$key" "$box/etc/edgekit/trusted-keys/"
for pack in "${packs[@]}" "${refused[@]}"; do cp "$pack" "$box/root/packs/"; done
first=/root/packs/$(basename "${packs[0]}")

inbox sh -c "cd /root && tar -xf $first box-runtime && sh box-runtime/install.sh" >"$work/log" 2>&1 ||
  fail runtime "box-runtime/install.sh exited $?" $?
verdict runtime ok "$(tail -n 1 "$work/log")"

for pack in "${packs[@]}"; do
  name=$(basename "$pack")
  inbox edgekit install "/root/packs/$name" >"$work/log" 2>&1 || fail install "edgekit install $name exited $?" $?
  verdict install ok "$name: $(grep -m1 -E 'installed|smoke' "$work/log" || tail -n 1 "$work/log")"
done

inbox edgekit run /var/lib/edgekit/current -p "The capital of France is" --max-tokens 8 -q >"$work/log" 2>&1 ||
  fail run "edgekit run exited $?" $?
verdict run ok "$(tr '\n' ' ' <"$work/log" | cut -c1-100)"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
inbox edgekit serve /var/lib/edgekit/current --port "$port" >"$work/serve.log" 2>&1 &
server=$!
answer=$(python3 - "$port" <<'ASK'
import json, sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}"
deadline = time.monotonic() + 600
while True:
    try:
        urllib.request.urlopen(f"{url}/health", timeout=5)
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("the server did not answer /health in 600 s")
        time.sleep(2)
model = json.load(urllib.request.urlopen(f"{url}/v1/models", timeout=60))["data"][0]["id"]
body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
request = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(request, timeout=600))
print(f"{model}, {reply['choices'][0]['finish_reason']}: {reply['choices'][0]['message']['content']!r}"[:100])
ASK
) || { kill "$server" 2>/dev/null; cp "$work/serve.log" "$work/log"; fail serve "no answer from /v1/chat/completions"; }
kill "$server" && wait "$server" 2>/dev/null || true
verdict serve ok "/v1/chat/completions on 127.0.0.1:$port: $answer"

current() {  # the release the box runs
  inbox edgekit status --json |
    python3 -c 'import json, sys; print(*["release %d" % s["release"] for s in json.load(sys.stdin)["slots"] if s["current"]])'
}
before=$(current) || fail status "edgekit status exited $?" $?
[[ -n $before ]] || fail status "no release is current"
verdict status ok "current: $before"

for pack in "${refused[@]}"; do
  name=$(basename "$pack")
  if inbox edgekit install "/root/packs/$name" >"$work/log" 2>&1; then fail refuse "edgekit install $name succeeded"; else code=$?; fi
  [[ $(current) == "$before" ]] || fail refuse "$name: the current release changed"
  why=$(grep -m1 -o -E '[^ ]+, log-probabilities of the recorded tokens: [^;]*;' "$work/log" || grep -m1 error "$work/log")
  verdict refuse ok "$name: exit $code, $why kept $before"
done

if [[ ${#packs[@]} -gt 1 ]]; then
  inbox edgekit rollback >"$work/log" 2>&1 || fail rollback "edgekit rollback exited $?" $?
  after=$(current)
  [[ $after != "$before" ]] || fail rollback "the current release is still $before"
  verdict rollback ok "current: $after (was $before)"
fi
echo "arm64-box: $steps steps passed on an emulated $machine box"
