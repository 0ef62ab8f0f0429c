#!/bin/sh
# Runs each test binary with a time limit and prints one line per test and a
# closing "N passed, N failed, N skipped, N cases skipped" line. Exit status 77
# means the program skipped (a feature the machine lacks; its last line says
# which); any other non-zero status is a failure. Cases that a passing program
# skipped (cmocka's "[  SKIPPED ] N test(s)") are counted apart.
limit=${TEST_TIMEOUT:-300}
pass=0; fail=0; skip=0; cases=0; failed=""
for t in "$@"; do
	name=${t##*/}
	log="$t.log"
	start=$(date +%s)
	timeout -k 10 "$limit" "$t" >"$log" 2>&1
	rc=$?
	secs=$(( $(date +%s) - start ))
	case $rc in
	0) pass=$((pass + 1))
		n=$(sed -n 's/^\[  SKIPPED \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | tail -n 1)
		if [ -n "$n" ] && [ "$n" -gt 0 ]; then
			cases=$((cases + n))
			echo "PASS $name (${secs}s; $n cases skipped: $(grep -m 1 '^skipped: ' "$log"))"
		else
			echo "PASS $name (${secs}s)"
		fi;;
	77) skip=$((skip + 1)); echo "SKIP $name: $(tail -n 1 "$log")";;
	*) fail=$((fail + 1)); failed="$failed $name"; echo "FAIL $name (exit $rc, ${secs}s)"; tail -n 40 "$log";;
	esac
done
[ -z "$SAN" ] || echo "sanitizers: $SAN"
echo "tests: $pass passed, $fail failed, $skip skipped, $cases cases skipped"
[ -z "$failed" ] || { echo "failed:$failed"; exit 1; }
exit 0
