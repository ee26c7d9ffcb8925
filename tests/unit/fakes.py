"""The unit tests' shared fakes: a scripted API server at the HTTP seam, a preloaded discovery, manifests.

`fake_client(api)` is a real `Client` (kubeconfig loading, query encoding, error mapping, pagination all
run) whose urllib3 pool is a `FakeApi`: it answers each request from a script and records it. Only pure
decisions are tested this way (which requests are sent, in which order, what is done with the answers);
what the API server itself defines (defaulting, managedFields, conflicts) is tested on the real cluster.
`StaticDiscovery` knows a few built-in kinds without asking; `cm` and `objs` build desired objects.
`FakeClock` is the one fake time every injected clock, wall clock and sleep of a unit test reads.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import Discovery, ResourceInfo
from gitops_sync.resource import DesiredObject

_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: "https://fake.invalid:6443", insecure-skip-tls-verify: true}}]
users: [{name: fake, user: {token: not-a-secret}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
"""


class FakeClock:
    """Fake time for every clock the code takes: `clock()` (monotonic), `clock.wall()`, `clock.sleep(s)`.

    Nothing waits: time moves only when the test calls `advance` (or the code calls `sleep`, which advances
    and adds to `slept`). The wall clock moves with the monotonic one, `wall` epoch seconds at the start, so
    one object serves code that reads either (the work queue reads monotonic time, the ownership history
    wall time). `after(s, action)` runs `action` once time has moved `s` seconds on, in due order: another
    holder releasing a Lease while the code under test sleeps, or a renewal answering late.
    """

    def __init__(self, now: float = 1000.0, *, wall: float = 1_700_000_000.0) -> None:
        self.now = now
        self.slept = 0.0  # the total of every `sleep` so far
        self.waits: list[float] = []  # every `wait` so far, in order
        self._wall_offset = wall - now
        self._timers: list[tuple[float, int, Callable[[], object]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        """Epoch seconds, moving with `now`."""
        return self.now + self._wall_offset

    def advance(self, seconds: float) -> None:
        """Move time on, then run every `after` action that fell due (those scheduled by them included)."""
        self.now += seconds
        while self._timers and self._timers[0][0] <= self.now:
            _, _, action = heapq.heappop(self._timers)
            action()

    def sleep(self, seconds: float) -> None:
        """What `time.sleep` would do, instantly: the code's own waits move the fake time."""
        self.slept += max(0.0, seconds)
        self.advance(max(0.0, seconds))

    def after(self, seconds: float, action: Callable[[], object]) -> None:
        heapq.heappush(self._timers, (self.now + seconds, next(self._seq), action))

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """The runtime's `Clock.wait` (a backoff that `stop` ends), instantly: recorded in `waits`, then time moves."""
        self.waits.append(seconds)
        self.advance(seconds)
        return stop.is_set()


@dataclass
class Call:
    """One request as the fake received it: JSON body decoded, query as a flat dict."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


@dataclass
class Response:
    """What urllib3 would return with `preload_content=True`: enough for `Client.request_status`."""

    status: int
    data: bytes
    headers: dict[str, str] = field(default_factory=dict)


# An answer: a JSON document (200), (status, document), (status, document, headers), or a function of the
# call giving one of those.
Answer = Any
Handler = Callable[[Call], Answer]


def status_body(code: int, reason: str, message: str = "") -> dict[str, Any]:
    """A `Status` object as the API server sends with an error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message or reason,
    }


@dataclass
class FakeApi:
    """Answers by (method, path): a list of answers is used in order and its last one repeats.

    A path with no script answers `default` (404 NotFound unless set), so reading an unknown object finds
    nothing. Every request is recorded in `calls`, in order (thread-safe).
    """

    default: Answer = field(default_factory=lambda: (404, status_body(404, "NotFound", "not found")))
    routes: dict[tuple[str, str], list[Answer]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, method: str, path: str, *answers: Answer) -> FakeApi:
        self.routes[(method, path)] = list(answers)
        return self

    def request(self, method: str, url: str, body: bytes | None = None, headers: Any = None, **_: Any) -> Response:
        parts = urlsplit(url)
        call = Call(
            method, parts.path, dict(parse_qsl(parts.query)), json.loads(body) if body else None, dict(headers or {})
        )
        with self._lock:
            self.calls.append(call)
            script = self.routes.get((method, parts.path))
            answer = (script.pop(0) if len(script) > 1 else script[0]) if script else self.default
        if callable(answer):
            answer = answer(call)
        status, doc, *extra = answer if isinstance(answer, tuple) else (200, answer)
        if isinstance(doc, bytes):  # a body as sent, e.g. the mux's plain-text "404 page not found"
            return Response(status, doc, *extra)
        return Response(status, b"" if doc is None else json.dumps(doc).encode(), *extra)

    def sent(self, method: str | None = None) -> list[Call]:
        """The calls so far, optionally of one method only."""
        with self._lock:
            return [c for c in self.calls if method is None or c.method == method]

    def writes(self) -> list[Call]:
        """Calls that are neither reads nor dry runs."""
        return [c for c in self.sent() if c.method != "GET" and not _dry(c)]


def _dry(call: Call) -> bool:
    return bool(call.query.get("dryRun")) or (isinstance(call.body, dict) and bool(call.body.get("dryRun")))


def fake_client(api: FakeApi, **kwargs: Any) -> Client:
    """A real Client whose HTTP goes to `api` (nothing leaves the process)."""
    fd, path = tempfile.mkstemp(suffix=".kubeconfig")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(_KUBECONFIG)
        client = Client(path, **kwargs)
    finally:
        os.unlink(path)
    client._conn.pool = api  # type: ignore[assignment]
    return client


class StaticDiscovery(Discovery):
    """Discovery preloaded with a few built-in kinds (the real one reads /api and /apis)."""

    def __init__(self) -> None:
        super().__init__(client=None)  # type: ignore[arg-type]
        kinds = [
            ResourceInfo("", "v1", "ConfigMap", "configmaps", True),
            ResourceInfo("", "v1", "Namespace", "namespaces", False),
            ResourceInfo("apps", "v1", "Deployment", "deployments", True),
        ]
        self._by_gvk = {(i.group, i.version, i.kind): i for i in kinds}
        self._preferred = {(i.group, i.kind): i for i in kinds}
        self._loaded = True


def loopback_kubeconfig(directory: Path, port: int) -> Path:
    """A kubeconfig (written into `directory`) for a plain-HTTP server of the test's own on 127.0.0.1:`port`."""
    path = directory / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]\n'
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    return path


def cm(name: str, ns: str | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def objs(*manifests: dict[str, Any]) -> list[DesiredObject]:
    return [DesiredObject(m, origin=f"f{i}.yaml#0") for i, m in enumerate(manifests)]
