#!/bin/sh
# Installs what `make check-rdma` needs besides the build's packages: QEMU,
# kmod (modprobe, depmod), a static busybox and cpio for the VM's initramfs,
# iproute2 (ip, rdma), the rdma-core userspace (libibverbs, librdmacm, the
# rxe provider) and the package lists, so that tests/rdma/vm.sh can fetch
# Debian's kernel package with apt-get download. Safe to run again.
set -e
PKGS="qemu-system-x86 kmod busybox-static cpio iproute2 ibverbs-providers
libibverbs1 librdmacm1"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
# apt-get download needs the lists even when nothing is missing
$SUDO apt-get update -qq
[ -z "$missing" ] && exit 0
echo "installing:$missing"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
