# shellcheck shell=bash
# debian_packages.sh - sourced by scripts/setup.sh and scripts/fuzz.sh.
#
#   need_debian_packages WHO PKG...
#
# Checks which of the Debian packages PKG are not installed.  As root it
# installs those (apt-get update first, no recommends) and says so as WHO;
# otherwise it names them on stderr and exits the calling script with 1.
# Nothing is done when every package is there.

need_debian_packages() {
  local who=$1 p missing=""
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" = 0 ]; then
    echo "$who: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    echo "$who: missing Debian packages:$missing (run as root, or install them)" >&2
    exit 1
  fi
}
