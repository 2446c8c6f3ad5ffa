"""moto's server mode, with DynamoDB requests serialised.

Real DynamoDB evaluates a ConditionExpression and applies the write as one
atomic step per item. moto's server answers requests on many threads and its
in-memory DynamoDB backend checks a condition and writes without a lock, so
under concurrent requests two conditional writes on one key can both succeed
(the project's 50-claim race test shows 2-3 winners against plain
`moto_server`). This launcher runs moto's own WSGI application unchanged and
holds one lock around each DynamoDB request only, which restores the
per-item atomicity the real service guarantees. SQS requests (including 20 s
long polls) still run concurrently.

    python3 scripts/moto_server.py -H 127.0.0.1 -p PORT
"""
import argparse
import signal
import sys
import threading

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app


class SerialiseDynamoDB:
    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB_"):
            return self.app(environ, start_response)
        with self.lock:
            # Drain the response inside the lock: the write happens while the
            # backend builds it.
            return list(self.app(environ, start_response))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, SerialiseDynamoDB(app), threaded=True, use_reloader=False)


if __name__ == "__main__":
    main()
