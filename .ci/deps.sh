#!/bin/sh
# Installs the Debian packages libkvtier's build, tests and benchmarks need,
# when any is missing. Safe to run again: it does nothing when all are there.
set -e
PKGS="build-essential pkg-config libibverbs-dev librdmacm-dev liburing-dev
libxxhash-dev xxhash libjansson-dev libnuma-dev libcmocka-dev fio gnuplot-nox"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
