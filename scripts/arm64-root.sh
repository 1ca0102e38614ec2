#!/usr/bin/env bash
# An emulated ARM64 box: a Debian bookworm arm64 root made with debootstrap, run through qemu-user-static.
#   scripts/arm64-root.sh            prints the path of a pristine root (made once, then reused)
# The root holds what a box brings and nothing more: Debian's minbase, Python 3.11 and its venv module (no
# compiler). It is made once per Debian release (the Date of bookworm's InRelease at the mirror) and kept in
# edgekit's cache; copy it before changing anything in it (scripts/arm64-box.sh does). Needs root, and Debian's
# qemu-user-static, binfmt-support and debootstrap (scripts/install.sh --dev installs them).
set -euo pipefail
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
cache=${EDGEKIT_ARM64_ROOTS:-${XDG_CACHE_HOME:-$HOME/.cache}/edgekit/arm64-root}
packages=python3,python3-venv

fail() { echo "arm64-root: $1" >&2; echo "  fix: $2" >&2; exit "${3:-3}"; }
[[ $(id -u) == 0 ]] || fail "debootstrap, chroot and binfmt_misc need root" "run it as root (CI does)"
for tool in debootstrap update-binfmts qemu-aarch64-static; do
  command -v "$tool" >/dev/null || fail "$tool is missing" "apt-get install qemu-user-static binfmt-support debootstrap"
done
# binfmt_misc runs aarch64 executables through qemu; its F flag opens the interpreter now, so the root needs no copy.
if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
[[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || update-binfmts --enable qemu-aarch64 >/dev/null
grep -q '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64 || update-binfmts --enable qemu-aarch64 >/dev/null

inrelease=$(curl -fsS -m 30 "$mirror/dists/$suite/InRelease") ||
  fail "cannot read $mirror/dists/$suite/InRelease" "check the network, or set DEBIAN_MIRROR"
released=$(awk -F': ' '$1 == "Date" {print $2; exit}' <<<"$inrelease")
key="$suite-$(date -u -d "$released" +%Y%m%dT%H%M%SZ)-$(printf %s "$packages" | sha256sum | cut -c1-8)"
root="$cache/$key"
if [[ ! -x "$root/usr/bin/python3.11" ]]; then
  mkdir -p "$cache"
  rm -rf "$root.partial"
  echo "arm64-root: debootstrap $suite arm64 ($packages), released $released: once per release, a few minutes" >&2
  debootstrap --arch=arm64 --variant=minbase --include="$packages" "$suite" "$root.partial" "$mirror" \
    >"$cache/$key.log" 2>&1 || fail "debootstrap failed (log: $cache/$key.log)" "read the log; rerun" 5
  rm -rf "$root.partial/var/cache/apt/archives/"*.deb
  mv "$root.partial" "$root"
  # Older releases' roots: one is enough.
  find "$cache" -mindepth 1 -maxdepth 1 -type d -name "$suite-*" ! -name "$key" -exec rm -rf {} +
fi
echo "$root"
