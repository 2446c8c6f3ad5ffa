#!/usr/bin/env bash
# Local production in one command: moto (SQS, DynamoDB, SNS), the queues,
# table and SNS topic (setup), development certificates (pki), the
# core-banking simulator over mutual TLS + OAuth2, serve against it over
# mutual TLS + OAuth2, and the console (token sign-in), all on 127.0.0.1 at
# free ports, their state, logs and files under one directory. Ctrl-C (or
# SIGTERM, or the end of --smoke) stops them all.
#
#   scripts/local-prod.sh [--dir DIR] [--bin PATH] [--smoke]
#
#   --dir DIR   state directory (default: a new temporary one, removed at
#               the end; a given one is kept, and its certificates reused)
#   --bin PATH  a built chargerecovery (default: go build into DIR/bin)
#   --smoke     start everything, send one charge 3 times, wait for one
#               debit in the ledger (corebank ledger), then stop (exit 0)
#
# After a SIGKILL of this script (no trap runs) its children are left:
# scripts/local-prod.sh --stop --dir DIR stops what DIR/pids names.
# Development only: the certificates, tokens and secrets it makes are for
# this machine.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
dir="" bin="${CHARGERECOVERY:-}" smoke="" stoponly=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --smoke) smoke=yes; shift ;;
    --stop) stoponly=yes; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "local-prod: unknown argument $1 (see $0 --help)" >&2; exit 2 ;;
  esac
done

say() { echo "local-prod: $*" >&2; }

# DIR/pids has one "PID START" line per process started (START: its start
# time in /proc/PID/stat), so that a recycled pid of another process is
# never signalled. stop_all sends SIGTERM to each (newest first: the
# console and serve before the bank and moto) and SIGKILL to what is left
# after 15 s.
started_at() { { [ -r "/proc/$1/stat" ] && sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; } || echo "-"; }
record() { echo "$1 $(started_at "$1")" >>"$dir/pids"; }
ours() {
  local pid=$1 at=$2
  kill -0 "$pid" 2>/dev/null || return 1
  [ "$at" = "-" ] || [ "$(started_at "$pid")" = "$at" ]
}
stop_all() {
  if [ ! -f "$dir/pids" ]; then
    "$here/moto.sh" stop "$dir"
    return 0
  fi
  local lines pid at alive
  lines=$(tac "$dir/pids")
  while read -r pid at; do
    [ -n "$pid" ] && ours "$pid" "$at" && kill -TERM "$pid" 2>/dev/null || true
  done <<<"$lines"
  for _ in $(seq 1 150); do
    alive=""
    while read -r pid at; do
      [ -n "$pid" ] && ours "$pid" "$at" && alive=yes
    done <<<"$lines"
    [ -z "$alive" ] && break
    sleep 0.1
  done
  while read -r pid at; do
    if [ -n "$pid" ] && ours "$pid" "$at"; then
      say "pid $pid did not stop in 15s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done <<<"$lines"
  while read -r pid at; do
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
  done <<<"$lines"
  "$here/moto.sh" stop "$dir" # also a moto started just before a kill
  rm -f "$dir/pids"
}

if [ -n "$stoponly" ]; then
  [ -n "$dir" ] || { echo "local-prod: --stop needs --dir DIR" >&2; exit 2; }
  dir=$(cd "$dir" && pwd)
  stop_all
  exit 0
fi

temp=""
if [ -z "$dir" ]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/local-prod.XXXXXX")
  temp=yes
fi
mkdir -p "$dir"
chmod 700 "$dir"
dir=$(cd "$dir" && pwd)
umask 077
# One copy per directory: the lock is held on fd 9, which every process
# started inherits, so it stays held while any of them lives (even after a
# SIGKILL of this script). Without flock, the pid check below still holds.
if command -v flock >/dev/null 2>&1; then
  exec 9>>"$dir/lock"
  if ! flock -n 9; then
    echo "local-prod: $dir is in use (another copy of this script, or what one killed with SIGKILL left: stop it with $0 --stop --dir $dir)" >&2
    exit 1
  fi
fi
if [ -s "$dir/pids" ]; then
  while read -r pid at; do
    if [ -n "$pid" ] && ours "$pid" "$at"; then
      echo "local-prod: $dir is in use (pid $pid is running: another copy of this script, or one killed with SIGKILL; stop it with: $0 --stop --dir $dir)" >&2
      exit 1
    fi
  done <"$dir/pids"
fi
: >"$dir/pids"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  say "stopping everything"
  stop_all
  if [ -n "$temp" ]; then
    rm -rf "$dir"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME CMD...: runs CMD in the background, logs in DIR/NAME.log.
start() {
  local name=$1
  shift
  "$@" >"$dir/$name.out" 2>"$dir/$name.log" &
  record "$!"
  eval "pid_$name=$!"
}

# wait_for WHAT PID TEST...: until TEST passes (30 s), failing when PID died.
wait_for() {
  local what=$1 pid=$2
  shift 2
  for _ in $(seq 1 300); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      say "$what exited; its log:"
      tail -n 20 "$dir/$what.log" >&2 || true
      return 1
    fi
    sleep 0.1
  done
  say "$what did not get ready in 30s; its log:"
  tail -n 20 "$dir/$what.log" >&2 || true
  return 1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

if [ -z "$bin" ]; then
  say "building chargerecovery into $dir/bin"
  (cd "$root" && go build -o "$dir/bin/chargerecovery" ./cmd/chargerecovery)
  bin="$dir/bin/chargerecovery"
fi

# moto: its pid goes into DIR/pids too, so that one list stops everything.
# moto.sh start runs in the background and is recorded, so that a stop
# while it starts (even --stop after a SIGKILL of this script) ends it and
# the server it started.
"$here/moto.sh" start "$dir" >"$dir/moto.start" &
record "$!"
if ! wait "$!"; then
  say "moto did not start"
  exit 1
fi
endpoint=$(cat "$dir/moto.endpoint")
record "$(cat "$dir/moto.pid")"

bank_port=$(free_port)
ops_port=$(free_port)
console_port=$(free_port)
bank="https://127.0.0.1:$bank_port"

# The key of the charges' fingerprints, and the console's sign-in tokens.
[ -s "$dir/fingerprint.key" ] || head -c 48 /dev/urandom | base64 >"$dir/fingerprint.key"
# The token file keeps hashes only; each person's token is a file of her own.
if [ ! -s "$dir/console-tokens" ]; then
  (umask 077
    : >"$dir/console-tokens"
    for who in "alice operator" "victor viewer"; do
      # shellcheck disable=SC2086
      "$bin" token $who >"$dir/token.out"
      name=${who%% *}
      sed -n 's/^token for [^:]*: //p' "$dir/token.out" >"$dir/$name.token"
      tail -n 1 "$dir/token.out" >>"$dir/console-tokens"
    done
    rm -f "$dir/token.out")
fi
if [ ! -s "$dir/pki/ca.crt" ]; then
  "$bin" pki --dir "$dir/pki" >"$dir/pki.out"
fi
pki="$dir/pki"

# One environment for every command: the same variables serve, send,
# status, corebank ledger and the console read.
kv() { printf 'export %s=%q\n' "$1" "$2"; }
{
  echo "# source this file to run chargerecovery against this local production"
  kv AWS_ENDPOINT_URL "$endpoint"
  kv AWS_REGION us-east-1
  kv AWS_ACCESS_KEY_ID test
  kv AWS_SECRET_ACCESS_KEY test
  kv AWS_CONFIG_FILE /dev/null
  kv AWS_SHARED_CREDENTIALS_FILE /dev/null
  kv IC_BACKEND aws
  kv IC_QUEUE local-charges
  kv IC_DLQ local-charges-dlq
  kv IC_TABLE local-charges
  kv IC_FINGERPRINT_KEY_FILE "$dir/fingerprint.key"
  kv IC_COREBANK_URL "$bank"
  kv IC_COREBANK_CA "$pki/ca.crt"
  kv IC_COREBANK_CLIENT_CERT "$pki/consumer.crt"
  kv IC_COREBANK_CLIENT_KEY "$pki/consumer.key"
  kv IC_COREBANK_OAUTH_TOKEN_URL "$bank/oauth/token"
  kv IC_COREBANK_OAUTH_CLIENT_ID chargerecovery
  kv IC_COREBANK_OAUTH_CLIENT_SECRET_FILE "$pki/oauth-client-secret"
  kv IC_NOTIFY sns
  kv IC_HTTP_ADDR "127.0.0.1:$ops_port"
  kv IC_METRICS_URL "http://127.0.0.1:$ops_port/metrics"
  kv IC_LOG_FORMAT text
  echo 'export IC_OPERATOR="${IC_OPERATOR:-${USER:-local-operator}}"'
} >"$dir/env.sh"
# shellcheck source=/dev/null
. "$dir/env.sh"

"$bin" setup --visibility 10s --notify sns --notify-sns-topic local-pre-debit-notices >"$dir/setup.out"
topic=$(sed -n 's/^serve with: --notify sns --notify-sns-topic //p' "$dir/setup.out")
kv IC_NOTIFY_SNS_TOPIC "$topic" >>"$dir/env.sh"
export IC_NOTIFY_SNS_TOPIC=$topic

start corebank "$bin" corebank --addr "127.0.0.1:$bank_port" \
  --tls-cert "$pki/bank.crt" --tls-key "$pki/bank.key" --client-ca "$pki/ca.crt" \
  --oauth-client-id chargerecovery --oauth-client-secret-file "$pki/oauth-client-secret"
wait_for corebank "$pid_corebank" grep -q https "$dir/corebank.out"

start serve "$bin" serve --visibility 10s --lease 20s --poll-wait 1s
wait_for serve "$pid_serve" python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$ops_port/readyz', timeout=1)"

start console "$bin" console --console-auth token --console-token-file "$dir/console-tokens" \
  --console-audit-file "$dir/audit.jsonl" --console-addr "127.0.0.1:$console_port" --poll-wait 1s
wait_for console "$pid_console" python3 -c "import socket; socket.create_connection(('127.0.0.1', $console_port), 1).close()"

cat <<EOF
local production is running (state, logs and files in $dir):
  moto (SQS, DynamoDB, SNS)   $endpoint                      pid $(cat "$dir/moto.pid")
  core-banking simulator      $bank (mutual TLS + OAuth2)  pid $pid_corebank
  serve (consumer)            ops http://127.0.0.1:$ops_port/metrics, /readyz    pid $pid_serve
  console                     http://127.0.0.1:$console_port/   (sign in: alice, token in $dir/alice.token)  pid $pid_console
  SNS topic                   $topic
send a charge (3 copies), then read the bank's ledger:
  . $(printf %q "$dir/env.sh")
  $bin send --charge-id CHG-1 --account 001234567890 --amount-minor 2500 --copies 3
  $bin corebank ledger
  $bin status
logs: $dir/{corebank,serve,console}.log; Ctrl-C stops everything.
EOF

if [ -n "$smoke" ]; then
  id="CHG-SMOKE-$$"
  "$bin" send --charge-id "$id" --account 001234567890 --amount-minor 2500 --copies 3 >/dev/null
  for _ in $(seq 1 600); do
    if "$bin" corebank ledger 2>/dev/null | grep -q "$id"; then
      break
    fi
    sleep 0.1
  done
  sleep 3 # let the two other copies come and be dropped
  "$bin" corebank ledger | tee "$dir/ledger.out"
  n=$(grep -c "$id" "$dir/ledger.out" || true)
  if [ "$n" != 1 ]; then
    say "smoke: $id posted $n times, want 1"
    exit 1
  fi
  if ! grep "charge_id=$id " "$dir/serve.log" | grep -q 'status=DEBITED '; then
    say "smoke: $id is not DEBITED with its notice published on SNS; serve's log:"
    grep "$id" "$dir/serve.log" >&2 || true
    exit 1
  fi
  if ! python3 -c "import urllib.request,sys; r=urllib.request.urlopen('http://127.0.0.1:$console_port/signin', timeout=5); sys.exit(r.status != 200)"; then
    say "smoke: the console's sign-in page did not answer 200"
    exit 1
  fi
  say "smoke: $id sent 3 times, debited once, its notice published on SNS; the console answers"
  exit 0
fi

# Until Ctrl-C, or until one of them stops on its own.
set +e
wait -n "$pid_corebank" "$pid_serve" "$pid_console"
rc=$?
set -e
say "a process stopped on its own (exit $rc); see the logs in $dir"
exit 1
