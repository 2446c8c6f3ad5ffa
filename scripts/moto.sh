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
# shellcheck source=scripts/emulator.sh
. "$here/emulator.sh"

installed() {
  python3 -c 'import moto.moto_server.werkzeug_app, werkzeug' >/dev/null 2>&1
}

# launch PORT: moto_server.py runs moto's server with DynamoDB requests
# serialised (see its docstring: plain moto does not make conditional
# writes atomic under load).
launch() {
  exec python3 "$here/moto_server.py" -H 127.0.0.1 -p "$1"
}

ready() {
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/moto-api/', timeout=1)" >/dev/null 2>&1
}

emu_main moto "moto_server.py" "moto's server mode is not installed; install it with: pip install \"moto[server]\"" "$@"
