#!/usr/bin/env bash
# Our DynamoDB store against AWS Powertools' idempotency utility
# (TypeScript, DynamoDB persistence layer), side by side on one plain moto
# server: fresh claims/s (claim, no-op work, complete) and duplicate calls/s
# at each concurrency, interleaved, several rounds; prints every run and the
# medians with the ratio ours ÷ Powertools, plus our capacity units.
#
#   scripts/bench-vs-powertools.sh [--keys 1000] [--concurrency 1,8,32] [--rounds 3]
#
# Needs node/npm (installs bench/powertools' pinned packages with npm ci)
# and moto's server mode (python3 -m moto.server).
set -euo pipefail
keys=1000 conc=1,8,32 rounds=3
. "$(dirname "$0")/benchlib.sh"
flags "[--keys N] [--concurrency 1,8,32] [--rounds N]" \
  keys=keys concurrency=conc rounds=rounds -- "$@"
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill "${moto_pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

if [ ! -d "$root/bench/powertools/node_modules" ]; then
  (cd "$root/bench/powertools" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
go build -o "$work/claims" "$root/bench/claims"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Plain moto, as a user would start it (not scripts/moto_server.py, which
# serialises DynamoDB requests for the race tests): both sides get the same.
python3 -m moto.server -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
moto_pid=$!
endpoint=http://127.0.0.1:$port
for _ in $(seq 100); do curl -fs "$endpoint/moto-api/" >/dev/null 2>&1 && break; sleep 0.1; done
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test

for r in $(seq "$rounds"); do
  for c in ${conc//,/ }; do
    # Alternate who goes first, so neither always meets a warmer server.
    if [ $(( (r + c) % 2 )) -eq 0 ]; then order="ours powertools"; else order="powertools ours"; fi
    for impl in $order; do
      if [ "$impl" = ours ]; then
        "$work/claims" -endpoint "$endpoint" -keys "$keys" -concurrency "$c" -reclaims 20
      else
        node --no-warnings "$root/bench/powertools/bench.mjs" --endpoint "$endpoint" --keys "$keys" --concurrency "$c"
      fi | sed "s/^{/{\"round\":$r,/" | tee -a "$work/rows.jsonl" >&2
    done
  done
done

python3 - "$work/rows.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r["work_runs"] != r["keys"]:
        sys.exit(f"{r['impl']} ran the work {r['work_runs']} times for {r['keys']} keys")
levels = sorted({r["concurrency"] for r in rows})
med = lambda impl, c, k: statistics.median(r[k] for r in rows if r["impl"] == impl and r["concurrency"] == c)
runs = lambda impl, c, k: " · ".join(f"{r[k]:.0f}" for r in rows if r["impl"] == impl and r["concurrency"] == c)
print("| concurrency | fresh/s ours (runs) | fresh/s Powertools (runs) | ratio | duplicates/s ours (runs) | duplicates/s Powertools (runs) | ratio |")
print("|---|---|---|---|---|---|---|")
for c in levels:
    fo, fp, do, dp = med("ours", c, "fresh_per_s"), med("powertools", c, "fresh_per_s"), med("ours", c, "dup_per_s"), med("powertools", c, "dup_per_s")
    print(f"| {c} | **{fo:.0f}** ({runs('ours', c, 'fresh_per_s')}) | **{fp:.0f}** ({runs('powertools', c, 'fresh_per_s')}) | {fo/fp:.2f}× "
          f"| **{do:.0f}** ({runs('ours', c, 'dup_per_s')}) | **{dp:.0f}** ({runs('powertools', c, 'dup_per_s')}) | {do/dp:.2f}× |")
cap = [r["capacity"] for r in rows if r["impl"] == "ours"]
c = cap[-1]
units = lambda x: {k: v for k, v in x.items() if k != "ItemBytes"}
same = all(units(x) == units(c) for x in cap)
sizes = sorted({x["ItemBytes"] for x in cap})
print(f"\nours, capacity per operation (DynamoDB's rules; a DONE item is {sizes[0] if len(sizes) == 1 else f'{sizes[0]}–{sizes[-1]}'} bytes; {'the same in every run' if same else 'VARIED: see the rows'}):")
print(f"  fresh {c['FreshWCU']:g} WCU {c['FreshRCU']:g} RCU in {c['CallsPerFresh']:g} calls; duplicate {c['DupWCU']:g} WCU {c['DupRCU']:g} RCU in {c['CallsPerDup']:g} call; "
      f"reclaim {c['ReclaimWCU']:g} WCU {c['ReclaimRCU']:g} RCU in {c['CallsPerReclaim']:g} calls")
print(f"  the sparse index's writes (DynamoDB's rules; the emulator bills none): fresh {c['FreshIndexWCU']:g} WCU, duplicate {c['DupIndexWCU']:g}, reclaim {c['ReclaimIndexWCU']:g}")
PY
