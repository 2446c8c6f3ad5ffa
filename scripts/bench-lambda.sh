#!/usr/bin/env bash
# The Lambda entry point against the long-running consumer, on one moto
# (issue 41, item 6): app/bench/lambda starts cmd/chargerecovery-lambda's
# bootstrap as fresh processes on a local Runtime API (cold start: exec to
# the first record's result; then warm batches in the same process), and
# chargerecovery bench --backend aws runs serve's consumer on the same
# emulator. Prints app/bench/lambda's JSON lines, then the consumer's.
#
#   scripts/bench-lambda.sh [--rounds 3] [--batches 5] [--batch 10] [--lambda-concurrency 10] [--charges 300] [--concurrency 10]
#
# Needs moto's server mode (scripts/with-moto.sh starts a private one). The
# bootstrap is built as deployed (CGO_ENABLED=0) unless CGO_ENABLED is set
# (CGO_ENABLED=1 reuses the build cache the tests left).
set -euo pipefail
rounds=3 batches=5 batch=10 lconc=10 charges=300 conc=10
. "$(dirname "$0")/benchlib.sh"
flags "[--rounds N] [--batches N] [--batch N] [--lambda-concurrency N] [--charges N] [--concurrency N]" \
  rounds=rounds batches=batches batch=batch lambda-concurrency=lconc charges=charges concurrency=conc -- "$@"
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Built before the emulator starts: a build is not part of any figure.
(cd "$root" && CGO_ENABLED=${CGO_ENABLED:-0} go build -tags lambda.norpc -o "$work/bootstrap" ./cmd/chargerecovery-lambda)
(cd "$root" && go build -o "$work/chargerecovery" ./cmd/chargerecovery)
(cd "$root" && go test -c -o "$work/lambda.test" ./app/bench/lambda)
cat >"$work/run.sh" <<RUN
set -euo pipefail
cd "$root/app/bench/lambda"
echo "# lambda: cold start and warm batches (IC_LAMBDA_CONCURRENCY=$lconc)"
"$work/lambda.test" -test.run '^\$' -test.bench Lambda -test.benchtime 1x -bootstrap "$work/bootstrap" \
  -rounds $rounds -batches $batches -batch $batch -lambda-concurrency $lconc | grep '^{'
echo "# consumer: chargerecovery bench --backend aws --charges $charges --dup-ratio 0 --concurrency $conc"
"$work/chargerecovery" bench --backend aws --charges $charges --dup-ratio 0 --concurrency $conc --progress 0 --json
RUN
uptime
"$root/scripts/with-moto.sh" bash "$work/run.sh"
