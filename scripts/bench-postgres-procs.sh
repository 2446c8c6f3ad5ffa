#!/usr/bin/env bash
# Charges/s of 1, 2 and 3 `serve` processes sharing one PostgreSQL database,
# each run on a fresh schema: N charges (30% sent twice, the copies queued
# after every original, as a daily redelivery would) are put on the queue
# with one INSERT, the processes drain it against the core-banking
# simulator (HTTP, in its own process), and the script checks the
# simulator's ledger (N postings, no debit request for a confirmed charge)
# and the records (N DONE).
#
#   scripts/bench-postgres-procs.sh [CHARGES] [PROCESS COUNTS...]
#   scripts/bench-postgres-procs.sh 20000 1 2 3
#
# Needs PostgreSQL (IC_POSTGRES_URL, default the test database on
# 127.0.0.1:5432), psql and curl.
set -euo pipefail
n=${1:-20000}; shift || true
counts=${*:-1 2 3}
url=${IC_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$(mktemp -d)/chargerecovery
(cd "$here" && go build -o "$bin" ./cmd/chargerecovery)
port=$((20000 + RANDOM % 20000))
"$bin" corebank --addr 127.0.0.1:$port --log-level warn & bank=$!
trap 'kill $bank 2>/dev/null || true' EXIT
sleep 1
for k in $counts; do
  schema="ic_procbench_${k}_$RANDOM"
  export IC_BACKEND=postgres IC_POSTGRES_URL="$url" IC_POSTGRES_SCHEMA="$schema" IC_COREBANK_URL=http://127.0.0.1:$port \
    IC_LOG_LEVEL=warn IC_HTTP_ADDR=127.0.0.1:0 IC_POLL_WAIT=1s IC_CONCURRENCY=32
  curl -s -X POST http://127.0.0.1:$port/v1/reset >/dev/null
  "$bin" setup >/dev/null
  psql "$url" -q -v ON_ERROR_STOP=1 -c "set search_path = $schema;
    insert into queue_messages (queue, body)
    select 'charge-due-events', convert_to(json_build_object('chargeId', 'CHG-' || g, 'accountId', '001234567890',
      'amount', json_build_object('minor', 2500, 'currency', 'INR'), 'chargeType', 'SMS_ALERT_FEE', 'dueDate', '2026-11-30')::text, 'UTF8')
    from generate_series(1, $n) g, generate_series(1, 2) copy where copy = 1 or g % 10 < 3 order by copy, random();"
  msgs=$(psql "$url" -Atc "select count(*) from $schema.queue_messages")
  start=$(date +%s.%N)
  pids=()
  for _ in $(seq 1 "$k"); do "$bin" serve & pids+=($!); done
  while [ "$(psql "$url" -Atc "select count(*) from $schema.queue_messages where queue = 'charge-due-events'")" != 0 ]; do sleep 0.2; done
  end=$(date +%s.%N)
  kill -TERM "${pids[@]}"; wait "${pids[@]}" || true
  done_count=$(psql "$url" -Atc "select count(*) from $schema.idempotency_records where state = 'DONE'")
  ledger=$(curl -s http://127.0.0.1:$port/v1/ledger | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["count"], sum(d.get("duplicateRequests", {}).values()))')
  psql "$url" -qc "set client_min_messages = warning; drop schema $schema cascade"
  python3 -c "
s=$end-$start; n=$n; m=$msgs
print(f'$k process(es): {n} charges / {m} messages in {s:.1f} s: {n/s:,.0f} charges/s, {m/s:,.0f} messages/s; DONE records $done_count; ledger postings, requests after confirmation: $ledger')"
done
