# Sourced by scripts/moto.sh and scripts/dynalite.sh: the start and stop
# of a private emulator server on 127.0.0.1 at a free port, its state in
# DIR/NAME.pid, NAME.endpoint and NAME.log.
#
#   emu_start NAME DIR LAUNCH READY   # LAUNCH PORT execs the server; READY PORT succeeds once it answers
#   emu_stop NAME DIR PATTERN         # stops the server DIR/NAME.pid names, if its command line still holds PATTERN

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# emu_is_ours PID PATTERN: PID is alive and is the server (its command
# line holds PATTERN): a recycled pid of another process is never signalled.
emu_is_ours() {
  local pid=$1 pattern=$2
  kill -0 "$pid" 2>/dev/null || return 1
  [ -r "/proc/$pid/cmdline" ] || return 0 # no /proc: trust the pid file
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$pattern"
}

# emu_start NAME DIR LAUNCH READY: runs LAUNCH PORT in the background at a
# free port until READY PORT succeeds (10 s; a server that dies, its port
# taken, is tried at another, three ports in all), and prints the endpoint.
# Stopped while starting (local-prod.sh --stop, Ctrl-C): the server too,
# and no further try.
emu_start() {
  local name=$1 dir=$2 launch=$3 ready=$4 port pid="" started=""
  mkdir -p "$dir"
  trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -f "$dir/$name.pid"; exit 143' TERM INT
  for _ in 1 2 3; do
    port=$(free_port)
    "$launch" "$port" >"$dir/$name.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/$name.pid"
    for _ in $(seq 1 100); do
      if ! kill -0 "$pid" 2>/dev/null; then
        break # died (port taken?): try another port
      fi
      if "$ready" "$port"; then
        started=yes
        break
      fi
      sleep 0.1
    done
    [ -n "$started" ] && break
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$dir/$name.pid"
  done
  if [ -z "$started" ]; then
    echo "$name: the server did not start; its log:" >&2
    cat "$dir/$name.log" >&2 || true
    return 1
  fi
  trap - TERM INT
  echo "http://127.0.0.1:$port" | tee "$dir/$name.endpoint"
}

# emu_stop NAME DIR PATTERN: stops the server DIR/NAME.pid names (TERM,
# then KILL after 5 s), if it is still ours.
emu_stop() {
  local name=$1 dir=$2 pattern=$3 pid
  [ -f "$dir/$name.pid" ] || return 0
  pid=$(cat "$dir/$name.pid")
  if emu_is_ours "$pid" "$pattern"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/$name.pid" "$dir/$name.endpoint"
}

# emu_main NAME PATTERN HINT ARGS...: the command line of an emulator
# script that defines installed, launch PORT and ready PORT:
# start DIR | stop DIR | check (HINT: what start says when the server is
# not installed; emu_more: further commands for the usage line).
emu_main() {
  local name=$1 pattern=$2 hint=$3
  shift 3
  case "${1:-}" in
    start)
      [ "$#" -eq 2 ] || { echo "usage: $0 start DIR" >&2; exit 2; }
      installed || { echo "$name: $hint" >&2; return 1; }
      emu_start "$name" "$2" launch ready
      ;;
    stop)
      [ "$#" -eq 2 ] || { echo "usage: $0 stop DIR" >&2; exit 2; }
      emu_stop "$name" "$2" "$pattern"
      ;;
    check) installed ;;
    *) echo "usage: $0 start DIR | stop DIR | check${emu_more:-}" >&2; exit 2 ;;
  esac
}
