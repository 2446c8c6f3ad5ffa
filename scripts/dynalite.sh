#!/usr/bin/env bash
# Starts or stops a private dynalite server (a second DynamoDB
# implementation, written from DynamoDB's own validation messages; in
# memory) on 127.0.0.1 at a free port, its state in DIR:
#
#   scripts/dynalite.sh start DIR   # prints the endpoint; DIR/dynalite.pid, dynalite.endpoint, dynalite.log
#   scripts/dynalite.sh stop DIR    # stops the server DIR/dynalite.pid names (if it is still dynalite)
#   scripts/dynalite.sh check       # exit 0 if node and scripts/dynalite's pinned package are installed
#   scripts/dynalite.sh install     # npm ci in scripts/dynalite (the version package-lock.json pins)
#
# Used by scripts/with-moto.sh beside moto: the DynamoDB store's suites run
# on both, since moto accepts requests that DynamoDB refuses. Needs node
# (>= 20) and npm.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cli="$here/dynalite/node_modules/dynalite/cli.js"

installed() {
  command -v node >/dev/null 2>&1 && [ -f "$cli" ]
}

install() {
  command -v npm >/dev/null 2>&1 || { echo "dynalite: npm is not installed (Node.js 20 or later is needed)" >&2; return 1; }
  (cd "$here/dynalite" && npm ci --no-audit --no-fund --loglevel=error >&2)
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# answers PORT: anything listens there (dynalite answers a bare GET with 400).
answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# is_ours PID: PID is alive and is a dynalite server (a recycled pid of
# another process is never signalled).
is_ours() {
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 1
  [ -r "/proc/$pid/cmdline" ] || return 0 # no /proc: trust the pid file
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "dynalite/cli.js"
}

start() {
  local dir=$1 port pid="" started=""
  if ! installed; then
    echo "dynalite: not installed; install it with: scripts/dynalite.sh install (npm ci in scripts/dynalite)" >&2
    return 1
  fi
  mkdir -p "$dir"
  trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -f "$dir/dynalite.pid"; exit 143' TERM INT
  for _ in 1 2 3; do
    port=$(free_port)
    # Tables become ACTIVE at once (DynamoDB takes seconds; the store waits either way).
    node "$cli" --host 127.0.0.1 --port "$port" --createTableMs 0 --deleteTableMs 0 --updateTableMs 0 \
      >"$dir/dynalite.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/dynalite.pid"
    for _ in $(seq 1 100); do
      if ! kill -0 "$pid" 2>/dev/null; then
        break # died (port taken?): try another port
      fi
      if answers "$port"; then
        started=yes
        break
      fi
      sleep 0.1
    done
    [ -n "$started" ] && break
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$dir/dynalite.pid"
  done
  if [ -z "$started" ]; then
    echo "dynalite: the server did not start; its log:" >&2
    cat "$dir/dynalite.log" >&2 || true
    return 1
  fi
  trap - TERM INT
  echo "http://127.0.0.1:$port" | tee "$dir/dynalite.endpoint"
}

stop() {
  local dir=$1 pid
  [ -f "$dir/dynalite.pid" ] || return 0
  pid=$(cat "$dir/dynalite.pid")
  if is_ours "$pid"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/dynalite.pid" "$dir/dynalite.endpoint"
}

case "${1:-}" in
  start) [ "$#" -eq 2 ] || { echo "usage: $0 start DIR" >&2; exit 2; }; start "$2" ;;
  stop) [ "$#" -eq 2 ] || { echo "usage: $0 stop DIR" >&2; exit 2; }; stop "$2" ;;
  check) installed ;;
  install) install ;;
  *) echo "usage: $0 start DIR | stop DIR | check | install" >&2; exit 2 ;;
esac
