# Sourced by the bench scripts: their options, and what the ones that run
# the service ask of it.

# flags USAGE NAME=VAR ... -- ARGS...: sets each VAR from --NAME VALUE in
# ARGS (a VAR not named keeps its default); anything else prints
# "usage: $0 USAGE" and exits 2.
flags() {
  local usage=$1 spec found pairs=()
  shift
  while [ "$1" != -- ]; do
    pairs+=("$1")
    shift
  done
  shift
  while [ $# -gt 0 ]; do
    found=""
    for spec in "${pairs[@]}"; do
      if [ "$1" = "--${spec%%=*}" ] && [ $# -ge 2 ]; then
        printf -v "${spec#*=}" '%s' "$2"
        found=yes
        break
      fi
    done
    [ -n "$found" ] || { echo "usage: $0 $usage" >&2; exit 2; }
    shift 2
  done
}

# free_port prints a port free on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_bank runs the bank simulator ($bin corebank) at a free port in the
# background, its pid added to pids, and sets bank to its URL.
start_bank() {
  local port
  port=$(free_port)
  "$bin" corebank --addr "127.0.0.1:$port" --log-level warn >/dev/null &
  pids+=($!)
  bank=http://127.0.0.1:$port
}

# queue_left prints the messages waiting or in flight on the main queue of
# the service $bin runs on $backend: `status` on the table queues; on SQS
# ($queue_url) only the queue's counts (status also scans the DynamoDB
# table for stuck claims, which would load the emulator).
queue_left() {
  if [ "$backend" = aws ]; then
    aws --endpoint-url "$AWS_ENDPOINT_URL" sqs get-queue-attributes --queue-url "$queue_url" \
      --attribute-names ApproximateNumberOfMessages ApproximateNumberOfMessagesNotVisible ApproximateNumberOfMessagesDelayed \
      --query 'Attributes' --output json | python3 -c 'import json,sys; print(sum(int(v) for v in json.load(sys.stdin).values()))' || echo 1
  else
    "$bin" status --json 2>/dev/null | python3 -c 'import json,sys; q=json.load(sys.stdin)["queue"]; print(q["waiting"]+q["inFlight"])' || echo 1
  fi
}
