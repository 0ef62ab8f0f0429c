#!/bin/bash
# tests/rdma/vm.sh - runs a command inside a small QEMU virtual machine that
# has a kernel soft-RoCE device, so the RDMA code is tested against a real
# kernel verbs stack (rdma_rxe, ib_uverbs, rdma_ucm) with the real libibverbs,
# librdmacm and rxe provider, on a machine without an RDMA NIC.
#
#   tests/rdma/vm.sh [--mem MiB] [--timeout S] -- COMMAND [ARG...]
#
# The guest boots Debian's own kernel (the package linux-image-amd64 points
# at, fetched with apt-get download and unpacked under $KVT_VM_DIR, default
# build/vm) with a busybox initramfs. It runs in software emulation (no KVM
# needed), so it proves correctness, never speed. Inside:
#   - the host's root is mounted read-only, so every installed library and
#     program is there; the repository is mounted read-write at its own path;
#     /tmp, /run, /var/tmp and /dev/shm are fresh tmpfs;
#   - a veth pair kva/kvb; kva holds 10.77.0.1, 10.77.0.2 and 10.77.0.3 and
#     carries one soft-RoCE device, rxe0: each node of a test takes its own
#     address, and traffic between them goes through rxe's loopback path;
#   - COMMAND runs as root from the repository root.
# Exits with COMMAND's status, 124 when the time limit passes, 77 when the
# machine lacks what the VM needs (QEMU, busybox-static, cpio, kmod, the
# kernel package): .ci/rdma-deps.sh installs those.
set -euo pipefail
mem=1536; tmo=900
while [ $# -gt 0 ]; do
	case $1 in
	--mem) mem=$2; shift 2 ;;
	--timeout) tmo=$2; shift 2 ;;
	--) shift; break ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${KVT_VM_DIR:-$root/build/vm}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

skip() { echo "vm.sh: $*; skipped (.ci/rdma-deps.sh installs what is missing)" >&2; exit 77; }
for tool in qemu-system-x86_64 cpio modprobe depmod dpkg-deb apt-get ip rdma; do
	command -v "$tool" >/dev/null || skip "no $tool"
done
bb=$(command -v busybox || true)
[ -n "$bb" ] && { ldd "$bb" 2>&1 || true; } | grep -q 'not a dynamic' || skip "no static busybox"
ldconfig -p | grep 'librdmacm\.so\.1 ' >/dev/null || skip "no librdmacm (rdma-core userspace)"
ls /usr/lib/*/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || skip "no rxe provider (ibverbs-providers)"

# --- a kernel and an initramfs, prepared once ---------------------------------
if [ ! -f "$dir/ready" ]; then
	echo "vm.sh: preparing a kernel and an initramfs in $dir" >&2
	kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*\).*/\1/p' | head -n 1)
	[ -n "$kpkg" ] || skip "apt knows no linux-image-amd64 (run apt-get update)"
	rm -rf "$dir/k" "$dir/dl"; mkdir -p "$dir/dl"
	(cd "$dir/dl" && apt-get download "$kpkg" >/dev/null 2>&1) || skip "cannot download $kpkg"
	dpkg-deb -x "$dir"/dl/*.deb "$dir/k"
	rm -rf "$dir/dl"
	kver=$(ls "$dir/k/lib/modules")
	depmod -b "$dir/k" "$kver"
	ird=$(mktemp -d)
	mkdir -p "$ird"/bin "$ird"/m "$ird"/proc "$ird"/sys "$ird"/dev "$ird"/mnt
	cp "$bb" "$ird/bin/busybox"
	kd=$dir/k/lib/modules/$kver/kernel
	# what mounting the host's file systems over virtio 9p needs, in load order
	mods="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p"
	for m in $mods; do
		f=$(find "$kd" -name "$m.ko*" | head -n 1)
		[ -n "$f" ] || continue     # built into this kernel
		case $f in
		*.xz) xz -dc "$f" >"$ird/m/$m.ko" ;;
		*.zst) zstd -qdc "$f" >"$ird/m/$m.ko" ;;
		*) cp "$f" "$ird/m/$m.ko" ;;
		esac
	done
	cat >"$ird/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $mods; do [ -f /m/\$m.ko ] && insmod /m/\$m.ko; done 2>/dev/null
EOF
	cat >>"$ird/init" <<'EOF'
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
o=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o ro,$o hostroot /mnt || { echo "vm.sh: cannot mount the host's root"; poweroff -f; }
mount -t proc proc /mnt/proc; mount -t sysfs sys /mnt/sys; mount -t devtmpfs dev /mnt/dev
for d in tmp run var/tmp dev/shm; do mkdir -p /mnt/$d 2>/dev/null; mount -t tmpfs t /mnt/$d; done
repo=$(arg kvt_repo)
# a repository under /tmp or /var/tmp lies in the fresh tmpfs: make its mount point
mkdir -p /mnt$repo 2>/dev/null
mount -t 9p -o $o repo /mnt$repo || { echo "vm.sh: cannot mount the repository"; poweroff -f; }
chroot /mnt /bin/sh -c "cd $repo && exec /bin/sh $(arg kvt_script)"
poweroff -f
EOF
	chmod +x "$ird/init"
	(cd "$ird" && find . | cpio -o -H newc 2>/dev/null | gzip) >"$dir/initrd.gz"
	rm -rf "$ird"
	touch "$dir/ready"
fi
kver=$(ls "$dir/k/lib/modules")

# --- the guest's script: soft-RoCE up, then the command -----------------------
script=$dir/guest.sh
{
	echo "K='-d $dir/k'"
	cat <<'EOF'
for m in crc32_generic rdma_rxe rdma_ucm ib_uverbs veth; do
	modprobe $K $m || { echo "vm.sh: modprobe $m failed"; echo KVT-VM-EXIT=1; exit 1; }
done
ip link set lo up
ip link add kva type veth peer name kvb
for a in 1 2 3; do ip addr add 10.77.0.$a/24 dev kva; done
ip link set kva up; ip link set kvb up
rdma link add rxe0 type rxe netdev kva || { dmesg | tail -n 5; echo KVT-VM-EXIT=1; exit 1; }
i=0
while [ "$(rdma link | grep -c 'state ACTIVE')" -lt 1 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
export HOME=/tmp TMPDIR=/tmp
EOF
	printf '('
	printf '%q ' "$@"
	printf ')\necho "KVT-VM-EXIT=$?"\n'
} >"$script"

log=$dir/console.log
set +e
timeout "$tmo" qemu-system-x86_64 -accel tcg -cpu max -m "$mem" -smp 2 -nographic -no-reboot \
	-kernel "$dir/k/boot/vmlinuz-$kver" -initrd "$dir/initrd.gz" \
	-append "console=ttyS0 quiet loglevel=3 panic=-1 kvt_repo=$root kvt_script=$script" \
	-virtfs local,path=/,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap \
	-virtfs local,path="$root",mount_tag=repo,security_model=passthrough,multidevs=remap \
	</dev/null 2>&1 | tr -d '\r' | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' | tee "$log" |
	sed -n '/^KVT-VM-EXIT=/d; /SeaBIOS\|iPXE\|Booting from ROM\|reboot: Power down/d; /^[[:space:]]*$/d; p'
qrc=${PIPESTATUS[0]}
set -e
rc=$(sed -n 's/^KVT-VM-EXIT=\([0-9]*\).*/\1/p' "$log" | tail -n 1)
[ "$qrc" -ne 124 ] || { echo "vm.sh: timed out after ${tmo}s" >&2; exit 124; }
[ -n "$rc" ] || { echo "vm.sh: the command did not run (the VM stopped early; see $log)" >&2; exit 1; }
exit "$rc"
