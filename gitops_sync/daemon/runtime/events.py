"""Kubernetes Events (core/v1) on the objects the daemon corrects or finds drifted.

Recording happens on a thread of its own so a slow API server never delays a pass or the log line
that reports drift. A repeated Event (same object, reason and series) updates the count of the one
already recorded, as kubectl and client-go's recorder do, instead of flooding the namespace.
Messages name fields and managers; Secret values never appear (callers pass no values for Secrets).
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gitops_sync.cluster.client import MERGE_PATCH, Client
from gitops_sync.errors import ClusterError, ForbiddenError, NotFoundError
from gitops_sync.formatting import rfc3339
from gitops_sync.log import get_logger
from gitops_sync.resource import ObjectKey

log = get_logger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
COMPONENT = "gitops-sync"
_SERIES_TTL = 600.0  # seconds an Event is updated rather than recreated (the apiserver keeps them ~1 h)
_MAX_MESSAGE = 1024


@dataclass(frozen=True)
class EventSpec:
    key: ObjectKey
    api_version: str
    reason: str
    message: str
    type: str = NORMAL
    series: str = ""  # what makes two Events "the same" beyond object+reason (e.g. the field)
    uid: str = ""
    resource_version: str = ""


@dataclass
class _Series:
    name: str
    namespace: str
    count: int
    first: str
    last_sent: float


class EventRecorder:
    def __init__(
        self,
        client: Client,
        *,
        instance: str,
        fallback_namespace: str = "default",
        on_drop: Callable[[], None] | None = None,
        maxsize: int = 1000,
    ) -> None:
        self._client = client
        self._instance = instance
        self._fallback_ns = fallback_namespace
        self._on_drop = on_drop
        self._queue: queue.Queue[EventSpec | None] = queue.Queue(maxsize=maxsize)
        self._series: dict[tuple[ObjectKey, str, str], _Series] = {}
        self._refused: set[str] = set()  # namespaces where creating Events is forbidden (logged once)
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def record(self, spec: EventSpec) -> None:
        try:
            self._queue.put_nowait(spec)
        except queue.Full:
            self._dropped()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def flush(self, timeout: float = 5.0) -> None:
        """Wait (bounded) until the queued Events are sent; used on shutdown."""
        deadline = time.monotonic() + timeout
        while not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued for up to `timeout` s (0: drop it, e.g. while the API server is away)."""
        self.flush(timeout)
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(timeout=min(1.0, timeout))

    def _dropped(self) -> None:
        if self._on_drop is not None:
            self._on_drop()

    def _run(self) -> None:
        while True:
            spec = self._queue.get()
            if spec is None:
                return
            try:
                self._send(spec)
            except ClusterError as exc:
                self._dropped()
                ns = self._namespace(spec)
                if isinstance(exc, ForbiddenError):
                    if ns not in self._refused:
                        self._refused.add(ns)
                        log.warning(
                            "cannot record Events (forbidden); reporting in logs and /status only",
                            namespace=ns,
                            error=str(exc),
                        )
                else:
                    log.warning("could not record Event", object=str(spec.key), reason=spec.reason, error=str(exc))
            except Exception:
                self._dropped()
                log.exception("could not record Event", object=str(spec.key))

    def _namespace(self, spec: EventSpec) -> str:
        return spec.key.namespace or self._fallback_ns

    def _send(self, spec: EventSpec) -> None:
        now = time.time()
        stamp = rfc3339(now)
        series_key = (spec.key, spec.reason, spec.series)
        message = spec.message[:_MAX_MESSAGE]
        ns = self._namespace(spec)
        s = self._series.get(series_key)
        if s is not None and now - s.last_sent < _SERIES_TTL:
            try:
                self._client.request(
                    "PATCH",
                    f"/api/v1/namespaces/{s.namespace}/events/{s.name}",
                    body={"count": s.count + 1, "lastTimestamp": stamp, "message": message},
                    content_type=MERGE_PATCH,
                    timeout=5,
                )
                s.count += 1
                s.last_sent = now
                return
            except NotFoundError:
                pass  # expired or deleted: record a new one
        digest = hashlib.sha256(f"{spec.key}|{spec.reason}|{spec.series}|{now}".encode()).hexdigest()[:10]
        name = f"{spec.key.name[:200]}.{digest}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "apiVersion": spec.api_version,
                "kind": spec.key.kind,
                "name": spec.key.name,
                **({"namespace": spec.key.namespace} if spec.key.namespace else {}),
                **({"uid": spec.uid} if spec.uid else {}),
                **({"resourceVersion": spec.resource_version} if spec.resource_version else {}),
            },
            "reason": spec.reason,
            "message": message,
            "type": spec.type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance[:128],
            "action": "Reconcile",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self._client.request("POST", f"/api/v1/namespaces/{ns}/events", body=body, timeout=5)
        self._series[series_key] = _Series(name, ns, 1, stamp, now)
        if len(self._series) > 10_000:  # bounded: forget the oldest series
            for k, _ in sorted(self._series.items(), key=lambda kv: kv[1].last_sent)[:1000]:
                del self._series[k]
