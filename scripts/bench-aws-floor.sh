#!/usr/bin/env bash
# The AWS path against its floor (issue 23): on one server at a time —
# plain moto, and dynalite, a second DynamoDB implementation that returns
# no item on a failed condition — bench/claims measures the server's plain
# PutItem rate (before and after the claims, same workers, a DONE record's
# copy), fresh charges (claim + DONE) and duplicates through our store, in
# one process per round. Fresh charges are set against half the plain write
# rate (two writes), duplicates against the plain rate divided by the
# requests a duplicate takes there (1 on moto; 2 where the item is not
# returned and the store reads it). Prints every run, the medians and the
# verdicts against the target (issue 41: 90%); beside them, fresh charges against half the rate of
# the same PutItem with the least condition (the key absent): what is left
# once the server's cost of evaluating a condition is counted.
#
# The store's requests go as the store sends them (-reported=false: no
# ReturnConsumedCapacity, which the floor's PutItems do not ask for either).
# CLAIMS_FLAGS adds bench/claims flags to every round, e.g.
# CLAIMS_FLAGS="-cpuprofile /tmp/claims.prof" or "-idle-conns 10".
#
#   scripts/bench-aws-floor.sh [--keys 600] [--concurrency 1,8] [--rounds 3] [--servers moto,dynalite] [--target 0.9]
#
# Needs moto's server mode and node/npm (installs scripts/dynalite's pinned
# package with npm ci).
set -euo pipefail
keys=600 conc=1,8 rounds=3 servers=moto,dynalite target=0.9
. "$(dirname "$0")/benchlib.sh"
flags "[--keys N] [--concurrency 1,8] [--rounds N] [--servers moto,dynalite] [--target 0.9]" \
  keys=keys concurrency=conc rounds=rounds servers=servers target=target -- "$@"
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

go build -o "$work/claims" "$root/bench/claims"
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test

start_server() { # name -> $endpoint (not in a subshell: its pid must reach the trap)
  local port; port=$(free_port)
  case "$1" in
    moto)
      # Plain moto, as a user would start it (not scripts/moto_server.py).
      python3 -m moto.server -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
      pids+=($!) ;;
    dynalite)
      if [ ! -d "$root/scripts/dynalite/node_modules" ]; then
        (cd "$root/scripts/dynalite" && npm ci --no-audit --no-fund --loglevel=error >&2)
      fi
      node "$root/scripts/dynalite/node_modules/dynalite/cli.js" --host 127.0.0.1 --port "$port" \
        --createTableMs 0 --deleteTableMs 0 --updateTableMs 0 >"$work/dynalite.log" 2>&1 &
      pids+=($!) ;;
    *) echo "unknown server $1" >&2; exit 2 ;;
  esac
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.1
  done
  endpoint="http://127.0.0.1:$port"
}

for server in ${servers//,/ }; do
  start_server "$server"
  for r in $(seq "$rounds"); do
    "$work/claims" -endpoint "$endpoint" -keys "$keys" -concurrency "$conc" -reclaims 0 -raw -reported=false ${CLAIMS_FLAGS:-} |
      sed "s/^{/{\"server\":\"$server\",\"round\":$r,/" | tee -a "$work/rows.jsonl" >&2
  done
  kill "${pids[-1]}" 2>/dev/null || true # one server at a time
done

python3 - "$work/rows.jsonl" "$target" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
target = float(sys.argv[2])
for r in rows:
    if r["work_runs"] != r["keys"]:
        sys.exit(f"{r['server']}: the work ran {r['work_runs']} times for {r['keys']} keys")
print(f"{'server':10} {'conc':>4} {'raw put/s':>10} {'cond put/s':>10} {'fresh/s':>9} {'of floor':>9} {'of cond/2':>9} {'dup/s':>9} {'req/dup':>8} {'of floor':>9}  verdict (>= {target:.0%} each; medians of {len({r['round'] for r in rows})})")
ok = True
for server in dict.fromkeys(r["server"] for r in rows):
    for c in sorted({r["concurrency"] for r in rows if r["server"] == server}):
        rs = [r for r in rows if r["server"] == server and r["concurrency"] == c]
        med = lambda k: statistics.median(r[k] for r in rs)
        fresh, dup = med("fresh_of_floor"), med("dup_of_floor")
        met = fresh >= target and dup >= target
        ok = ok and met
        cond = statistics.median(r["fresh_per_s"] / (r["raw_cond_put_per_s"] / 2) for r in rs)
        print(f"{server:10} {c:>4} {med('raw_put_per_s'):>10.0f} {med('raw_cond_put_per_s'):>10.0f} {med('fresh_per_s'):>9.0f} {fresh:>8.0%} {cond:>8.0%} {med('dup_per_s'):>9.0f} {med('requests_per_dup'):>8.1f} {dup:>8.0%}  {'met' if met else 'NOT met'}")
print("floor:", "met everywhere" if ok else "not met everywhere")
PY
