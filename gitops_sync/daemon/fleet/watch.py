"""The GitSync objects as the fleet sees them: list, then watch; relist after a 410 or a broken watch.

Runs on the `gitsync-watch` thread; every event goes to the controller's handler (controller.py
`_gitsync_event`, one at a time, in order); a relist also reports the GitSyncs gone meanwhile as DELETED.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.runtime.queue import Backoff
from gitops_sync.errors import ApiError, ClusterError
from gitops_sync.log import get_logger
from gitops_sync.resource import Manifest
from gitops_sync.source import mask_url

log = get_logger("gitops_sync.daemon")


class GitSyncWatch:
    def __init__(
        self,
        client: Client,
        watch_client: Client,
        path: str,
        *,
        on_event: Callable[[str, Manifest], None],
        known: Callable[[], list[str]],
        on_listed: Callable[[], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.client = client
        self.watch_client = watch_client
        self.path = path
        self.on_event = on_event
        self.known = known  # namespace/name of every GitSync seen so far
        self.on_listed = on_listed
        self.stopping = stopping
        self._halt = threading.Event()  # the wait between relists

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        backoff = Backoff(0.5, 8.0, jitter=0.2)
        rv = ""
        while not self.stopping():
            try:
                if not rv:
                    doc = self.client.request("GET", self.path, timeout=60)
                    rv = str((doc.get("metadata") or {}).get("resourceVersion") or "")
                    self._replace(doc.get("items") or [])
                    backoff.reset()
                rv = self._follow(rv)
            except ClusterError as exc:
                if isinstance(exc, ApiError) and exc.status == 404:
                    log.error("the GitSync CRD is not installed (kubectl apply -k deploy/kubernetes/crd/)")
                else:
                    log.warning("GitSync watch failed; relisting", error=mask_url(str(exc)))
                rv = ""
                self._halt.wait(backoff.next())

    def _follow(self, rv: str) -> str:
        """One watch from `rv`; the resourceVersion to go on from ("" = relist)."""
        query: dict[str, str | int | bool | None] = {
            "watch": True,
            "resourceVersion": rv,
            "allowWatchBookmarks": True,
            "timeoutSeconds": 300,
        }
        for line in self.watch_client.stream_lines(self.path, query=query, timeout=330):
            if self.stopping():
                return rv
            event = json.loads(line)
            etype, obj = str(event.get("type", "")), event.get("object") or {}
            if etype == "ERROR":  # 410 Gone (resourceVersion too old) or another watch error
                log.warning("GitSync watch expired; relisting", error=mask_url(str(obj.get("message", ""))))
                return ""
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or "") or rv
            if etype != "BOOKMARK":
                self.on_event(etype, obj)
        return rv

    def _replace(self, items: list[Manifest]) -> None:
        seen = set()
        for obj in items:
            meta = obj.get("metadata") or {}
            seen.add(f"{meta.get('namespace')}/{meta.get('name')}")
            self.on_event("ADDED", obj)
        for ref in [ref for ref in self.known() if ref not in seen]:
            ns, name = ref.split("/", 1)
            self.on_event("DELETED", {"metadata": {"namespace": ns, "name": name}})
        self.on_listed()


__all__ = ["GitSyncWatch"]
