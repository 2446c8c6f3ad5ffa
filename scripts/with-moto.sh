#!/usr/bin/env bash
# Runs a command with a private moto server (SQS + DynamoDB emulator) on
# 127.0.0.1 at a free port, and stops the server when the command ends.
#
#   scripts/with-moto.sh go test -race ./...
#
# The command sees IC_AWS_TEST_ENDPOINT and AWS_ENDPOINT_URL set to the
# server, dummy credentials and a region (only when none are set). Tests use
# IC_AWS_TEST_ENDPOINT, so they never reach real AWS by accident.
#
# moto comes with this project's machines; elsewhere: pip install "moto[server]"
# If moto is missing, outside CI the command still runs and the AWS tests skip
# (saying how to start it); with CI=true the script fails.
set -euo pipefail

if [ "$#" -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi

here=$(cd "$(dirname "$0")" && pwd)
# moto_server.py runs moto's server with DynamoDB requests serialised (see its
# docstring: plain moto does not make conditional writes atomic under load).
if python3 -c 'import moto.moto_server.werkzeug_app, werkzeug' >/dev/null 2>&1; then
  moto=(python3 "$here/moto_server.py")
else
  echo "with-moto: moto's server mode is not installed; install it with: pip install \"moto[server]\"" >&2
  if [ "${CI:-}" = "true" ]; then
    exit 1
  fi
  echo "with-moto: running without it; tests that need SQS/DynamoDB will skip" >&2
  exec "$@"
fi

logdir=$(mktemp -d)
pid=""
stop() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$logdir"
}
trap stop EXIT INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

started=""
for try in 1 2 3; do
  port=$(free_port)
  "${moto[@]}" -H 127.0.0.1 -p "$port" >"$logdir/moto.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    if ! kill -0 "$pid" 2>/dev/null; then
      break # died (port taken?): try another port
    fi
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/', timeout=1)" >/dev/null 2>&1; then
      started=yes
      break
    fi
    sleep 0.1
  done
  [ -n "$started" ] && break
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
done
if [ -z "$started" ]; then
  echo "with-moto: moto did not start; its log:" >&2
  cat "$logdir/moto.log" >&2 || true
  exit 1
fi

endpoint="http://127.0.0.1:$port"
echo "with-moto: moto server at $endpoint (pid $pid)" >&2
export IC_AWS_TEST_ENDPOINT="$endpoint"
export AWS_ENDPOINT_URL="$endpoint"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"

set +e
"$@"
rc=$?
set -e
exit "$rc"
