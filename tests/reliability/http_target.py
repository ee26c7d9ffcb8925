"""A daemon HTTP server with stand-in endpoints in a process of its own, for the HTTP fault tests.

Its own process so the tests can count exactly its threads and file descriptors (/proc/PID), apart from
the test's client sockets. Prints the port on stdout, serves until stdin closes.
`python -m tests.reliability.http_target '{"idle_timeout": 2, ...}'` (keyword arguments of `Limits`).
"""

from __future__ import annotations

import json
import sys
import time

from gitops_sync.daemon.reconcile.triggers import verify_webhook
from gitops_sync.daemon.serving.http import Endpoints, HttpServer, Limits

SECRET = b"s3cret"


BIG = ["x" * 1000] * 8000  # /status?history=all: ~8 MB, more than socket buffers hold


def status(full_history: bool = False) -> dict[str, object]:
    time.sleep(0.05)  # a little work, so concurrent requests overlap in the workers
    return {"revision": "abc", "objects": BIG if full_history else [], "fullHistory": full_history}


def stand_in() -> Endpoints:
    """Healthy, ready, a one-line /metrics, `status` above, the webhook checked against SECRET."""
    return Endpoints(
        healthy=lambda: (True, "ok"),
        ready=lambda: (True, "ok"),
        metrics=lambda: b"up 1\n",
        status=status,
        webhook=lambda headers, body: verify_webhook(headers, body, SECRET),
    )


def main() -> None:
    limits = Limits(**json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}"))
    srv = HttpServer("127.0.0.1:0", stand_in(), limits=limits).start()
    print(srv.port, flush=True)
    sys.stdin.read()
    srv.stop()


if __name__ == "__main__":
    main()
