#!/usr/bin/env bash
# Runs every fuzz target of the project for a given time each (default 60s),
# one after the other, and prints each target's execution count.
#
#   scripts/fuzz.sh 5m        # about 1.2M executions per target on a 2-core machine
#
# A target's seed corpus is in its package's testdata/fuzz/<Target>/; a
# failing input found by the fuzzer is written there too (commit it as a
# regression test once fixed).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-60s}"
targets=(
  "./app/charge FuzzParseEvent"
  "./app/charge FuzzParseEventDifferential"
)
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  echo "== $name ($pkg) for $fuzztime"
  log=$(mktemp)
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log" | grep -E '^(fuzz: elapsed: .*execs|--- FAIL|FAIL|ok|PASS)' | tail -3; then
    true
  fi
  if grep -qE '^(--- FAIL|FAIL)' "$log"; then
    cat "$log"; rm -f "$log"; exit 1
  fi
  rm -f "$log"
done
