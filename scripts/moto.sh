#!/usr/bin/env bash
# Starts or stops a private moto server (SQS + DynamoDB + SNS emulator) on
# 127.0.0.1 at a free port, its state in DIR:
#
#   scripts/moto.sh start DIR   # prints the endpoint; DIR/moto.pid, moto.endpoint, moto.log
#   scripts/moto.sh stop DIR    # stops the server DIR/moto.pid names (if it is still moto)
#   scripts/moto.sh check       # exit 0 if moto's server mode is installed
#
# Used by scripts/with-moto.sh (one command) and scripts/local-prod.sh (a
# whole local production). moto comes with this project's machines;
# elsewhere: pip install "moto[server]"
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

installed() {
  python3 -c 'import moto.moto_server.werkzeug_app, werkzeug' >/dev/null 2>&1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# is_ours PID DIR: PID is alive and is the moto server started for DIR (a
# recycled pid of another process is never signalled).
is_ours() {
  local pid=$1 dir=$2
  kill -0 "$pid" 2>/dev/null || return 1
  [ -r "/proc/$pid/cmdline" ] || return 0 # no /proc: trust the pid file
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "moto_server.py" 
}

start() {
  local dir=$1 port pid started=""
  if ! installed; then
    echo "moto: moto's server mode is not installed; install it with: pip install \"moto[server]\"" >&2
    return 1
  fi
  mkdir -p "$dir"
  # Stopped while starting (local-prod.sh --stop, Ctrl-C): the server too,
  # and no further try.
  pid=""
  trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -f "$dir/moto.pid"; exit 143' TERM INT
  # moto_server.py runs moto's server with DynamoDB requests serialised
  # (see its docstring: plain moto does not make conditional writes
  # atomic under load).
  for _ in 1 2 3; do
    port=$(free_port)
    python3 "$here/moto_server.py" -H 127.0.0.1 -p "$port" >"$dir/moto.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/moto.pid"
    for _ in $(seq 1 100); do
      if ! kill -0 "$pid" 2>/dev/null; then
        break # died (port taken?): try another port
      fi
      if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/', timeout=1)" >/dev/null 2>&1; then
        started=yes
        break
      fi
      sleep 0.1
    done
    [ -n "$started" ] && break
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$dir/moto.pid"
  done
  if [ -z "$started" ]; then
    echo "moto: the server did not start; its log:" >&2
    cat "$dir/moto.log" >&2 || true
    return 1
  fi
  trap - TERM INT
  echo "http://127.0.0.1:$port" | tee "$dir/moto.endpoint"
}

stop() {
  local dir=$1 pid
  [ -f "$dir/moto.pid" ] || return 0
  pid=$(cat "$dir/moto.pid")
  if is_ours "$pid" "$dir"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/moto.pid" "$dir/moto.endpoint"
}

case "${1:-}" in
  start) [ "$#" -eq 2 ] || { echo "usage: $0 start DIR" >&2; exit 2; }; start "$2" ;;
  stop) [ "$#" -eq 2 ] || { echo "usage: $0 stop DIR" >&2; exit 2; }; stop "$2" ;;
  check) installed ;;
  *) echo "usage: $0 start DIR | stop DIR | check" >&2; exit 2 ;;
esac
