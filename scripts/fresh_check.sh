#!/usr/bin/env bash
# fresh_check.sh - proves the README's two commands on a fresh Debian 12.
#
# Creates a minimal Debian 12 (bookworm) root with debootstrap, clones the
# committed tree (HEAD, not the working tree) into it and runs, inside a
# chroot with /proc, /sys and /dev mounted, the README's commands as written:
#
#   bash scripts/run.sh  --epochs 1 --train-subset 2000   (the default run, shortened)
#   bash scripts/test.sh -L smoke                         (tensors, autograd, nn, data,
#                                                          REPL, training program, oracle)
#
# and then the LuaRocks check (tests/sh/test_luarocks.sh) when the tree has it.
# Each command's last lines and exit status are printed; the check exits
# non-zero if any failed.  Mounts and files are removed on every path.
#
# Needs root and the network to Debian's archive; installs debootstrap on the
# host if missing (for this check only: scripts/setup.sh does not).
# Usage: scripts/fresh_check.sh
# Environment: DLUA_FRESH_MIRROR (default http://deb.debian.org/debian),
#              DLUA_FRESH_DIR (parent of the temporary root, default /var/tmp),
#              DLUA_FRESH_KEEP=1 (keep the root afterwards, for a look inside),
#              DLUA_FRESH_TESTS (the test command's ctest arguments instead of
#              "-L smoke"; empty: the whole suite, as the README's command runs it).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
mirror=${DLUA_FRESH_MIRROR:-http://deb.debian.org/debian}
security=${mirror%/debian}/debian-security
start=$(date +%s)

say() { echo "fresh_check: $*"; }
elapsed() { local s=$(($(date +%s) - start)); printf '%d:%02d' $((s / 60)) $((s % 60)); }

if [ "$(id -u)" != 0 ]; then
  say "needs root (debootstrap, chroot, mounts)" >&2
  exit 2
fi
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap on the host"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } ||
    { say "cannot install debootstrap" >&2; exit 2; }
fi

parent=${DLUA_FRESH_DIR:-/var/tmp}
root=$(mktemp -d "$parent/dlua-fresh.XXXXXX") || exit 2
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null
  done
  # never delete through a mount that is still there
  if grep -q " $root/" /proc/mounts; then
    say "mounts still present under $root; not removing it" >&2
  elif [ "${DLUA_FRESH_KEEP:-0}" = 1 ]; then
    say "kept $root"
  else
    rm -rf "$root"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mnt() { # mnt TARGET mount-args...
  local target=$1
  shift
  mount "$@" "$target" && mounted+=("$target")
}

log=$root.log
say "debootstrap bookworm (minbase) into $root from $mirror"
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$log" 2>&1; then
  tail -n 20 "$log"
  say "debootstrap failed" >&2
  exit 1
fi
rm -f "$log"
say "base system ready ($(elapsed))"

# the sources a fresh installation has: the release, its updates, security
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# The host's TLS trust for pip (the tests fetch TensorBoard's reader from
# PyPI): a network that intercepts TLS has its own CA in the host's bundle,
# which a fresh system lacks; on a plain network the bundle adds nothing.
pip_cert=
host_ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
if [ -f "$host_ca" ]; then
  cp "$host_ca" "$root/etc/dlua-host-ca.crt" && pip_cert=/etc/dlua-host-ca.crt
fi

mnt "$root/proc" -t proc proc || exit 1
mnt "$root/sys" -t sysfs sysfs || exit 1
mnt "$root/dev" --bind /dev || exit 1
mnt "$root/dev/pts" --bind /dev/pts || exit 1

# the committed tree, as a new user's clone has it
if ! git clone -q --no-local "$repo" "$root/root/dlua"; then
  say "git clone of $repo failed" >&2
  exit 1
fi
say "cloned $(git -C "$repo" rev-parse --short HEAD) into the root"

# in_root NAME COMMAND: runs COMMAND in the clone inside the chroot as root,
# with a clean environment (PIP_CERT aside); prints its last lines and status.
status=0
results=()
in_root() {
  local name=$1 cmd=$2 out=$root/root/$1.log t0 rc
  t0=$(date +%s)
  say "[$name] $cmd"
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 ${pip_cert:+PIP_CERT=$pip_cert} \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/dlua && $cmd" >"$out" 2>&1 </dev/null
  rc=$?
  echo "----- [$name] last lines -----"
  tail -n 25 "$out"
  echo "----- [$name] exit status $rc, $(($(date +%s) - t0)) s -----"
  results+=("$name: exit $rc, $(($(date +%s) - t0)) s")
  [ "$rc" -eq 0 ] || status=1
}

in_root run "bash scripts/run.sh --epochs 1 --train-subset 2000"
in_root test "bash scripts/test.sh ${DLUA_FRESH_TESTS--L smoke}"
if [ -f "$root/root/dlua/tests/sh/test_luarocks.sh" ]; then
  in_root luarocks "bash tests/sh/test_luarocks.sh"
fi

say "summary ($(elapsed) in all):"
for r in "${results[@]}"; do echo "  $r"; done
if [ "$status" -eq 0 ]; then say "passed"; else say "FAILED" >&2; fi
exit "$status"
