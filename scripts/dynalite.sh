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
# shellcheck source=scripts/emulator.sh
. "$here/emulator.sh"
cli="$here/dynalite/node_modules/dynalite/cli.js"
run="$here/dynalite/run.js" # cli.js, surviving a client that goes away mid-request

installed() {
  command -v node >/dev/null 2>&1 && [ -f "$cli" ]
}

install() {
  command -v npm >/dev/null 2>&1 || { echo "dynalite: npm is not installed (Node.js 20 or later is needed)" >&2; return 1; }
  (cd "$here/dynalite" && npm ci --no-audit --no-fund --loglevel=error >&2)
}

# launch PORT: tables become ACTIVE at once (DynamoDB takes seconds; the
# store waits either way).
launch() {
  exec node "$run" --host 127.0.0.1 --port "$1" --createTableMs 0 --deleteTableMs 0 --updateTableMs 0
}

# ready PORT: anything listens there (dynalite answers a bare GET with 400).
ready() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

if [ "${1:-}" = install ]; then
  install
  exit
fi
emu_more=" | install"
emu_main dynalite "dynalite/run.js" "not installed; install it with: scripts/dynalite.sh install (npm ci in scripts/dynalite)" "$@"
