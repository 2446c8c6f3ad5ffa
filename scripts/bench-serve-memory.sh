#!/usr/bin/env bash
# The memory of one `serve` process over a long run (performance round 4,
# item 5: flat over 1M charges on each backend). A producer sends N charges
# (and --copies percent of them once more, as redeliveries) in chunks of
# 50,000 with `send --file` while serve drains them against the core-banking
# simulator (its own process, not measured); every --interval seconds the
# serve process's RSS (/proc) and, from its /metrics, the Go heap in use,
# the goroutines and the debits so far are written to a CSV. The run ends
# when serve has made N successful debits and the queue is empty; the
# simulator's ledger must then hold N postings and no debit request for a
# charge it had already confirmed (exactly once).
#
#   scripts/bench-serve-memory.sh --backend embedded|postgres|redis|aws [--charges N]
#     [--copies PERCENT] [--interval SECONDS] [--seconds LIMIT] [--out FILE.csv]
#
# --seconds stops the run after LIMIT seconds even if not every charge is
# debited yet (a loaded machine, the emulator): the summary then covers
# the debits so far, and the ledger is checked for those (postings ≈
# debits, no request after a confirmation).
#
# embedded: one SQLite file in a temp dir (FULL durability, the default).
# postgres: IC_POSTGRES_URL_BENCH (default the test database on
#   127.0.0.1:5432), a schema of its own, dropped at the end.
# redis: the Redis store (IC_REDIS_URL_BENCH, default
#   redis://127.0.0.1:6379/10, a key prefix of its own, removed at the end)
#   with the embedded queue (a SQLite file).
# aws: a private moto server (SQS + DynamoDB, scripts/moto_server.py);
#   concurrency 8. The emulator is slow: 1M charges take hours there.
#
# It prints a summary: RSS and heap at 10% (start of the steady state),
# 50% and 100% of the debits, their maxima, and end ÷ start.
set -euo pipefail
backend=embedded n=1000000 copies=10 interval=5 out= limit=
. "$(dirname "$0")/benchlib.sh"
flags "--backend embedded|postgres|redis|aws [--charges N] [--copies PERCENT] [--interval SECONDS] [--seconds LIMIT] [--out FILE.csv]" \
  backend=backend charges=n copies=copies interval=interval out=out seconds=limit -- "$@"
case "$backend" in embedded|postgres|redis|aws) ;; *) echo "$0: --backend must be embedded, postgres, redis or aws" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
[ -n "$out" ] || out=${TMPDIR:-/tmp}/serve-memory-$backend-$$.csv
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ "$backend" = postgres ]; then
    psql "$pgurl" -qc "set client_min_messages = warning; drop schema if exists $IC_POSTGRES_SCHEMA cascade" || true
  fi
  if [ "$backend" = redis ]; then
    redis-cli -u "$IC_REDIS_URL" --scan --pattern "$IC_REDIS_PREFIX*" | xargs -r -n 1000 redis-cli -u "$IC_REDIS_URL" unlink >/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
bin=$work/chargerecovery
(cd "$root" && go build -o "$bin" ./cmd/chargerecovery)

start_bank
mkdir "$work/chunks"
python3 - "$n" "$copies" "$work/chunks" <<'PY'
import json, random, sys
n, copies, dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(7)
ev = lambda i: json.dumps({"schemaVersion": 1, "chargeId": f"CHG-{i:08d}", "accountId": "001234567890",
    "amount": {"minor": 2500, "currency": "INR"}, "chargeType": "SMS_ALERT_FEE", "dueDate": "2026-11-30"})
# Each chunk of 50,000 originals is followed by its copies (redeliveries
# of charges already sent), so duplicates arrive throughout the run.
chunk = 50_000
for c, lo in enumerate(range(0, n, chunk)):
    ids = list(range(lo, min(lo + chunk, n)))
    dup = [i for i in ids if rng.randrange(100) < copies]
    with open(f"{dir}/{c:05d}.ndjson", "w") as f:
        for i in ids + dup:
            print(ev(i), file=f)
PY
msgs=$(cat "$work"/chunks/*.ndjson | wc -l)
for _ in $(seq 50); do curl -fs "$bank/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

head -c 48 /dev/urandom | base64 > "$work/fingerprint.key"; chmod 600 "$work/fingerprint.key"
http_port=$(free_port)
# Notices go to the log (at warn level, nowhere): the simulator channel
# (sim) keeps every notice in the process's memory, which is what a run
# of this length would then measure (about 6 heap objects per charge).
export IC_FINGERPRINT_KEY_FILE="$work/fingerprint.key" IC_NOTIFY=log IC_COREBANK_URL=$bank IC_LOG_LEVEL=warn \
  IC_HTTP_ADDR=127.0.0.1:$http_port IC_POLL_WAIT=1s IC_CONCURRENCY=${IC_CONCURRENCY_BENCH:-32} IC_BACKEND=$backend
pgurl=
case "$backend" in
  embedded) export IC_DB=$work/memory.db ;;
  postgres)
    export IC_POSTGRES_URL=${IC_POSTGRES_URL_BENCH:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable} IC_POSTGRES_SCHEMA=ic_memory_$RANDOM$RANDOM
    # psql takes the URL without pgx's pool settings (pool_max_conns=N).
    pgurl=$(printf %s "$IC_POSTGRES_URL" | sed -E 's/([?&])pool_[a-z_]+=[^&]*&?/\1/g; s/[?&]$//') ;;
  redis)
    export IC_BACKEND=embedded IC_DB=$work/memory.db IC_STORE=redis IC_REDIS_URL=${IC_REDIS_URL_BENCH:-redis://127.0.0.1:6379/10} IC_REDIS_PREFIX=ic-memory-$RANDOM$RANDOM: ;;
  aws)
    mport=$(free_port)
    python3 "$root/scripts/moto_server.py" -H 127.0.0.1 -p "$mport" >"$work/moto.log" 2>&1 & pids+=($!)
    export AWS_ENDPOINT_URL=http://127.0.0.1:$mport AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
      IC_CONCURRENCY=${IC_CONCURRENCY_BENCH:-8}
    for _ in $(seq 100); do curl -fs "$AWS_ENDPOINT_URL/moto-api/" >/dev/null 2>&1 && break; sleep 0.1; done ;;
esac
"$bin" setup >/dev/null

"$bin" serve 2>>"$work/serve.log" & serve=$!; pids+=($serve)
metrics=http://127.0.0.1:$http_port/metrics
for _ in $(seq 100); do curl -fs "$metrics" >/dev/null 2>&1 && break; sleep 0.1; done
(for f in "$work"/chunks/*.ndjson; do "$bin" send --file "$f" >/dev/null 2>>"$work/send.log"; done; touch "$work/sent") & pids+=($!)

echo "seconds,rss_kib,heap_inuse_bytes,heap_objects,goroutines,debits,received" >"$out"
start=$(date +%s.%N)
sample() {
  local rss m
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$serve/status")
  m=$(curl -fs --max-time 5 "$metrics" | awk '
    /^go_memstats_heap_inuse_bytes / {h=$2} /^go_memstats_heap_objects / {o=$2} /^go_goroutines / {g=$2}
    /^chargerecovery_debits_total\{result="success"\} / {d=$2} /^chargerecovery_messages_received_total / {r=$2}
    END {printf "%.0f,%.0f,%.0f,%.0f,%.0f", h, o, g, d, r}') || m=",,,,"
  printf '%.1f,%s,%s\n' "$(echo "$(date +%s.%N) - $start" | bc)" "$rss" "$m" >>"$out"
}
[ "$backend" = aws ] && queue_url=$(aws --endpoint-url "$AWS_ENDPOINT_URL" sqs get-queue-url --queue-name charge-due-events --query QueueUrl --output text)
while :; do
  kill -0 "$serve" 2>/dev/null || { echo "$0: serve exited; its log:" >&2; tail -20 "$work/serve.log" >&2; exit 1; }
  sample
  debits=$(tail -1 "$out" | cut -d, -f6)
  if [ -e "$work/sent" ] && [ "${debits:-0}" -ge "$n" ] && [ "$(queue_left)" = 0 ]; then break; fi
  if [ -n "$limit" ] && [ "$(echo "$(date +%s.%N) - $start >= $limit" | bc)" = 1 ]; then break; fi
  sleep "$interval"
done
end=$(date +%s.%N)
kill -TERM "$serve"; wait "$serve" || true
ledger=$(curl -fs "$bank/v1/ledger" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["count"], sum(d.get("duplicateRequests", {}).values()))')
python3 - "$out" "$n" "$msgs" "$backend" "$ledger" "$(echo "$end - $start" | bc)" <<'PY'
import csv, sys
path, n, msgs, backend, ledger, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], float(sys.argv[6])
rows = [r for r in csv.DictReader(open(path)) if r["debits"]]
posted, dup = map(int, ledger.split())
done, partial = int(rows[-1]["debits"]), False
if done < n:
    partial = True
    # stopped at --seconds: the figures cover the debits so far
    # serve finishes what it holds when stopped: the ledger may have a few
    # more postings than the last sample's debits, never fewer.
    print(f"{backend}: stopped after {secs:.0f} s at {done} of {n} charges ({posted} postings once serve stopped); {dup} requests after confirmation: "
          + ("OK" if dup == 0 and posted >= done else "FAILED"))
    n = done
def at(frac):
    # the first sample at or past frac of the debits
    return next(r for r in rows if int(r["debits"]) >= frac * n)
mib = lambda kib: int(kib) / 1024
hmib = lambda b: int(b) / 2**20
s, m, e = at(0.10), at(0.50), rows[-1]
if not partial:
    print(f"{backend}: {n} charges ({msgs} messages) in {secs:.0f} s, {len(rows)} samples; ledger {posted} postings, {dup} requests after confirmation: "
          + ("OK" if posted == n and dup == 0 else "FAILED"))
for name, r in (("10%", s), ("50%", m), ("end", e)):
    print(f"  at {name:>3} ({int(r['debits']):>8} debits, {float(r['seconds']):7.0f} s): RSS {mib(r['rss_kib']):7.1f} MiB, heap in use {hmib(r['heap_inuse_bytes']):6.1f} MiB, {int(r['heap_objects']):>8} objects, {r['goroutines']} goroutines")
print(f"  max: RSS {max(mib(r['rss_kib']) for r in rows):.1f} MiB, heap in use {max(hmib(r['heap_inuse_bytes']) for r in rows):.1f} MiB")
print(f"  end / 10%: RSS {int(e['rss_kib']) / int(s['rss_kib']):.2f}x, heap in use {int(e['heap_inuse_bytes']) / int(s['heap_inuse_bytes']):.2f}x")
xs = [(int(r["debits"]), int(r["rss_kib"]), int(r["heap_inuse_bytes"])) for r in rows if int(r["debits"]) >= 0.1 * n]
if len(xs) > 2:
    mx = sum(x for x, _, _ in xs) / len(xs)
    sxx = sum((x - mx) ** 2 for x, _, _ in xs) or 1
    for name, i, unit in (("RSS", 1, 1024), ("heap in use", 2, 2**20)):
        my = sum(x[i] for x in xs) / len(xs)
        slope = sum((x[0] - mx) * (x[i] - my) for x in xs) / sxx
        print(f"  {name} slope past 10%: {slope * 100_000 / unit:+.1f} MiB per 100k charges (least squares)")
print(f"  samples: {path}")
PY
