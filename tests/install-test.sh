#!/bin/sh
# Installs the built tree into a temporary prefix and builds outside
# programs against it through pkg-config, as users do: a C consumer linked
# dynamically, statically and fully static (cc -static), the header as
# strict C99 and as C++, and a check that the shared library exports only
# kvt_ symbols and that the static archive defines no other global name (its
# internal symbols are local, so an engine linking it inherits none of them).
set -u
BUILD=${BUILD:-build}
tmp=$(mktemp -d /tmp/kvt-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
check() { # name, command...
	name=$1; shift
	if "$@" >"$tmp/log" 2>&1; then
		pass=$((pass + 1)); echo "PASS $name"
	else
		fail=$((fail + 1)); echo "FAIL $name"; tail -n 20 "$tmp/log"
	fi
}
make -s install BUILD="$BUILD" PREFIX="$tmp/prefix" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; echo "install: 0 passed, 1 failed"; exit 1; }
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
export LD_LIBRARY_PATH="$tmp/prefix/lib"
cflags=$(pkg-config --cflags kvtier) libs=$(pkg-config --libs kvtier)
slibs=$(pkg-config --static --libs kvtier)
check "pkg-config-dynamic" sh -c "cc -o $tmp/c tests/install/consumer.c $cflags $libs && $tmp/c"
check "static-archive" sh -c "cc -o $tmp/cs tests/install/consumer.c $cflags $tmp/prefix/lib/libkvtier.a $(echo "$slibs" | sed 's/-lkvtier//') && $tmp/cs"
# Fully static, as `cc -static` with what pkg-config --static lists: every
# dependency's own dependencies must be there (librdmacm's libnl).
check "pkg-config-static-full" sh -c "cc -static -o $tmp/cf tests/install/consumer.c $cflags $slibs && $tmp/cf"
check "header-c99" cc -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only $cflags -x c tests/install/consumer.c
check "header-c++" sh -c "c++ -std=c++11 -Wall -Wextra -Werror -o $tmp/cpp tests/install/header.cpp $cflags $libs && $tmp/cpp"
check "exports-only-kvt" sh -c "nm -D --defined-only $tmp/prefix/lib/libkvtier.so | awk '{print \$3}' | grep -v '^KVTIER_' | grep -v '^kvt_' | (! grep .)"
# The archive's global definitions: only kvt_ names, and the same ones the
# shared library exports.
nm -D --defined-only "$tmp/prefix/lib/libkvtier.so" | awk 'NF == 3 && $2 != "A" {sub(/@.*/, "", $3); print $3}' | sort >"$tmp/so.syms"
nm -g --defined-only "$tmp/prefix/lib/libkvtier.a" | awk 'NF == 3 {print $3}' | sort >"$tmp/a.syms"
check "archive-globals-only-kvt" sh -c "grep -q '^kvt_open\$' $tmp/a.syms && ! grep -v '^kvt_' $tmp/a.syms"
check "archive-globals-match-exports" cmp "$tmp/so.syms" "$tmp/a.syms"
check "soname" sh -c "readelf -d $tmp/prefix/lib/libkvtier.so | grep -q 'SONAME.*libkvtier.so.0'"
# Every page of man/, under the section directory man -M looks in.
check "man-pages" sh -c "for f in man/*.[1357]; do b=\${f##*/}; test -f $tmp/prefix/share/man/man\${b##*.}/\$b || { echo missing \$b; exit 1; }; done"
check "kvbench-installed" test -x "$tmp/prefix/bin/kvbench"
check "kvtierd-installed" sh -c "$tmp/prefix/bin/kvtierd --version"
# Uninstalling leaves nothing under the prefix: no file, link or directory.
make -s uninstall BUILD="$BUILD" PREFIX="$tmp/prefix" >"$tmp/uninstall.log" 2>&1 ||
	cat "$tmp/uninstall.log"
check "uninstall-leaves-nothing" sh -c "! find $tmp/prefix 2>/dev/null | grep ."
echo "install: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
