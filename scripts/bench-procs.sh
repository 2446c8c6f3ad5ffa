#!/usr/bin/env bash
# The scale-out curve: charges/s of 1, 2, 3 … `serve` processes sharing one
# backend, each count on a fresh queue and store. N charges (30% sent
# twice, the copies queued after every original, as a daily redelivery
# would) are queued with `send --file` before the clock starts; the
# processes drain them against the core-banking simulator (HTTP, its own
# process). charges/s counts to the last posting; the queue must then
# drain too, and the simulator's ledger must hold N postings and no debit
# request for a charge it had already confirmed.
#
#   scripts/bench-procs.sh --backend embedded|postgres|aws [--charges N] [--procs "1 2 3"]
#
# embedded: one SQLite file in a temp dir (FULL durability, the default).
# postgres: IC_POSTGRES_URL_BENCH (default the test database on
#   127.0.0.1:5432), a schema of its own per count. aws: a private moto
#   server per count (SQS + DynamoDB), so each count starts from an empty
#   emulator.
set -euo pipefail
backend=embedded n=20000 procs="1 2 3"
. "$(dirname "$0")/benchlib.sh"
flags "--backend embedded|postgres|aws [--charges N] [--procs \"1 2 3\"]" \
  backend=backend charges=n procs=procs -- "$@"
case "$backend" in embedded|postgres|aws) ;; *) echo "$0: --backend must be embedded, postgres or aws" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
bin=$work/chargerecovery
(cd "$root" && go build -o "$bin" ./cmd/chargerecovery)

start_bank
python3 - "$n" >"$work/events.ndjson" <<'PY'
import json, random, sys
n = int(sys.argv[1]); rng = random.Random(7)
ev = lambda i: json.dumps({"schemaVersion": 1, "chargeId": f"CHG-{i:08d}", "accountId": "001234567890",
    "amount": {"minor": 2500, "currency": "INR"}, "chargeType": "SMS_ALERT_FEE", "dueDate": "2026-11-30"})
copies = [i for i in range(n) if i % 10 < 3]; rng.shuffle(copies)
for i in list(range(n)) + copies: print(ev(i))
PY
msgs=$(wc -l <"$work/events.ndjson")
for _ in $(seq 50); do curl -fs "$bank/v1/ledger" >/dev/null 2>&1 && break; sleep 0.1; done

for k in $procs; do
  unset IC_DB IC_POSTGRES_URL IC_POSTGRES_SCHEMA AWS_ENDPOINT_URL IC_QUEUE IC_DLQ IC_TABLE
  # 32 workers per process; 8 on the emulator, which answers one DynamoDB
  # request at a time (more only queue up behind it and time out).
  head -c 48 /dev/urandom | base64 > "$work/fingerprint.key"; chmod 600 "$work/fingerprint.key"
  export IC_FINGERPRINT_KEY_FILE="$work/fingerprint.key" IC_NOTIFY=sim IC_BACKEND=$backend IC_COREBANK_URL=$bank IC_LOG_LEVEL=warn IC_HTTP_ADDR=127.0.0.1:0 IC_POLL_WAIT=1s IC_CONCURRENCY=${IC_CONCURRENCY_BENCH:-32}
  [ "$backend" = aws ] && export IC_CONCURRENCY=${IC_CONCURRENCY_BENCH:-8}
  case "$backend" in
    embedded) export IC_DB=$work/procs-$k.db ;;
    postgres) export IC_POSTGRES_URL=${IC_POSTGRES_URL_BENCH:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable} IC_POSTGRES_SCHEMA=ic_procbench_${k}_$RANDOM ;;
    aws)
      mport=$(free_port)
      # moto with DynamoDB requests serialised (scripts/moto_server.py): plain
      # moto does not make conditional writes atomic, and processes race here.
      python3 "$root/scripts/moto_server.py" -H 127.0.0.1 -p "$mport" >"$work/moto-$k.log" 2>&1 & moto=$!; pids+=($moto)
      export AWS_ENDPOINT_URL=http://127.0.0.1:$mport AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
      for _ in $(seq 100); do curl -fs "$AWS_ENDPOINT_URL/moto-api/" >/dev/null 2>&1 && break; sleep 0.1; done ;;
  esac
  curl -fs -X POST "$bank/v1/reset" >/dev/null
  "$bin" setup >/dev/null
  "$bin" send --file "$work/events.ndjson" >/dev/null 2>&1
  [ "$backend" = aws ] && queue_url=$(aws --endpoint-url "$AWS_ENDPOINT_URL" sqs get-queue-url --queue-name charge-due-events --query QueueUrl --output text)
  start=$(date +%s.%N)
  serve=()
  for _ in $(seq "$k"); do "$bin" serve 2>>"$work/serve.log" & serve+=($!); done
  pids+=("${serve[@]}")
  # The clock stops at the last posting (polling the simulator is cheap);
  # then the queue must drain (duplicates dropped), read empty twice.
  until [ "$(curl -fs "$bank/v1/ledger" | python3 -c 'import json,sys; print(json.load(sys.stdin)["count"])')" = "$n" ]; do sleep 0.2; done
  end=$(date +%s.%N)
  empty=0
  while [ "$empty" -lt 2 ]; do
    if [ "$(queue_left)" = 0 ]; then empty=$((empty + 1)); else empty=0; fi
    sleep 1
  done
  drained=$(date +%s.%N)
  kill -TERM "${serve[@]}"; wait "${serve[@]}" || true
  [ "$backend" = aws ] && { kill "$moto"; wait "$moto" 2>/dev/null || true; }
  # psql takes the URL without pgx's pool settings (pool_max_conns=N).
  [ "$backend" = postgres ] && psql "$(printf %s "$IC_POSTGRES_URL" | sed -E 's/([?&])pool_[a-z_]+=[^&]*&?/\1/g; s/[?&]$//')" \
    -qc "set client_min_messages = warning; drop schema $IC_POSTGRES_SCHEMA cascade"
  ledger=$(curl -fs "$bank/v1/ledger" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["count"], sum(d.get("duplicateRequests", {}).values()))')
  python3 -c "
s = $end - $start; n = $n; m = $msgs; posted, dup = map(int, '$ledger'.split())
ok = 'OK' if posted == n and dup == 0 else 'FAILED'
print(f'$backend, $k process(es): {n} charges posted in {s:.1f} s: {n/s:,.0f} charges/s; all {m} messages handled within {$drained - $start:.1f} s; ledger {posted} postings, {dup} requests after confirmation: {ok}')"
done
