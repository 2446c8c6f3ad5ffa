#!/usr/bin/env bash
# The long linearizability campaign: the same check CI runs (concurrent
# claims, extensions, finishes, reopens and reads on hot keys, answers lost
# after the store applied them, clocks offset, leases abandoned; porcupine
# against the state machine), with SCALE times the histories, on every
# store: memstore, SQLite, PostgreSQL, the Redis store, DynamoDB on moto
# (item returned on a failed condition, and the read fallback). Prints one
# row a store and exits 1 if any history was not linearizable (the failing
# test names porcupine's visualisation of it).
#
#   scripts/linearizability-campaign.sh [--scale N]     (default 10)
#
# Needs PostgreSQL (IC_TEST_POSTGRES_URL, default 127.0.0.1:5432/test) and
# Redis (IC_TEST_REDIS_URL, default 127.0.0.1:6379); starts its own moto.
set -euo pipefail
cd "$(dirname "$0")/.."

scale=10
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) scale=$2; shift 2 ;;
    *) echo "linearizability-campaign: unknown argument $1 (usage: $0 [--scale N])" >&2; exit 2 ;;
  esac
done
[[ $scale =~ ^[1-9][0-9]*$ ]] || { echo "linearizability-campaign: --scale must be a positive integer" >&2; exit 2; }

logs=$(mktemp -d)
keep=""
trap '[ -n "$keep" ] || rm -rf "$logs"' EXIT
runs=(
  "memstore|./idempotency/storetest|^TestMemstoreIsLinearizable$"
  "sqlite|./sqlite|^TestConformance$/^Linearizable$"
  "postgres|./postgres|^TestStoreConformance$/^Linearizable$"
  "redis|./redisstore|^TestStoreConformance$/^Linearizable$"
  "dynamodb (moto)|./awsdynamodb|^TestLinearizable$"
)
status=0
printf '%-42s %10s %11s %11s %11s  %s\n' store histories operations recording checking result
for r in "${runs[@]}"; do
  IFS='|' read -r name pkg pattern <<<"$r"
  out="$logs/$(tr -c 'a-z0-9\n' '-' <<<"$name").log"
  if ! CI=true IC_LINEARIZABLE_SCALE=$scale scripts/with-moto.sh go test -count=1 -timeout 3h -v -run "$pattern" "$pkg" >"$out" 2>&1; then
    status=1 keep=yes
    echo "$name: FAILED; the whole run (every call of the failing history, with -v) is in $out" >&2
    grep -E "not linearizable|^--- FAIL|^FAIL|Error" "$out" | head -5 >&2
  fi
  # One line per Linearizable run, after the === RUN line of its (sub)test:
  # "N histories, M operations, linearizable; recording X, checking Y: map[...]"
  awk -v store="$name" '
    /^=== (RUN|CONT)/ { test = $3 }
    / histories, [0-9]+ operations, linearizable; / {
      line = $0; sub(/^.*\.go:[0-9]+: /, "", line)
      split(line, w, /[ ,;:]+/)
      label = store; if (test ~ /\//) { t = test; sub(/^[^\/]*\//, "", t); gsub(/_/, " ", t); if (t != "Linearizable") label = store " " t }
      printf "%-42s %10s %11s %11s %11s  %s\n", label, w[1], w[3], w[7], w[9], "linearizable"
    }' "$out"
done
exit $status
