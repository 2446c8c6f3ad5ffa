#!/usr/bin/env bash
# Runs a command with a private moto server (SQS + DynamoDB emulator) and a
# private dynalite server (a second DynamoDB implementation, which refuses
# what DynamoDB refuses where moto accepts it) on 127.0.0.1 at free ports,
# and stops both when the command ends.
#
#   scripts/with-moto.sh go test -race ./...
#
# The command sees IC_AWS_TEST_ENDPOINT and AWS_ENDPOINT_URL set to the
# server, dummy credentials and a region (only when none are set). Tests use
# IC_AWS_TEST_ENDPOINT, so they never reach real AWS by accident. It also
# sees IC_DYNALITE_TEST_ENDPOINT set to dynalite: the DynamoDB store's suites
# run on both.
#
# moto comes with this project's machines; elsewhere: pip install "moto[server]"
# If moto is missing, outside CI the command still runs and the AWS tests skip
# (saying how to start it); with CI=true the script fails. dynalite is the
# version scripts/dynalite/package-lock.json pins, installed with npm ci on
# first use (scripts/dynalite.sh install); without node/npm, the same rule.
set -euo pipefail

if [ "$#" -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi

here=$(cd "$(dirname "$0")" && pwd)
if ! "$here/moto.sh" check; then
  echo "with-moto: moto's server mode is not installed; install it with: pip install \"moto[server]\"" >&2
  if [ "${CI:-}" = "true" ]; then
    exit 1
  fi
  echo "with-moto: running without it; tests that need SQS/DynamoDB will skip" >&2
  exec "$@"
fi

statedir=$(mktemp -d)
stop() {
  "$here/dynalite.sh" stop "$statedir" || true
  "$here/moto.sh" stop "$statedir" || true
  rm -rf "$statedir"
}
trap stop EXIT INT TERM

# scripts/moto.sh: a free port, moto_server.py (DynamoDB requests
# serialised), three tries.
endpoint=$("$here/moto.sh" start "$statedir")
pid=$(cat "$statedir/moto.pid")
echo "with-moto: moto server at $endpoint (pid $pid)" >&2
export IC_AWS_TEST_ENDPOINT="$endpoint"
export AWS_ENDPOINT_URL="$endpoint"

if ! "$here/dynalite.sh" check && command -v npm >/dev/null 2>&1; then
  "$here/dynalite.sh" install || true
fi
if dendpoint=$("$here/dynalite.sh" start "$statedir"); then
  echo "with-moto: dynalite at $dendpoint (pid $(cat "$statedir/dynalite.pid"))" >&2
  export IC_DYNALITE_TEST_ENDPOINT="$dendpoint"
else
  echo "with-moto: dynalite did not start (needs node and npm: scripts/dynalite.sh install)" >&2
  if [ "${CI:-}" = "true" ]; then
    exit 1
  fi
  echo "with-moto: running without it; tests that need dynalite will skip" >&2
fi
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"

set +e
"$@"
rc=$?
set -e
exit "$rc"
