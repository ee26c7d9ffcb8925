"""The GitSync objects as the fleet sees them, through the runtime's one list/watch loop (listwatch.py):
list, then watch; relist after a 410 or a broken watch.

Runs on the `gitsync-watch` thread; every event goes to the controller's handler (controller.py
`_gitsync_event`, one at a time, in order); a list also reports the GitSyncs gone meanwhile as DELETED.
"""

from __future__ import annotations

from collections.abc import Callable

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.runtime.listwatch import BACKOFF, Callbacks, ListWatch, Retry
from gitops_sync.errors import ApiError
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
    ) -> None:
        self.on_event = on_event
        self.known = known  # namespace/name of every GitSync seen so far
        self.on_listed = on_listed
        self.loop = ListWatch(
            client,
            path,
            Callbacks(listed=self._listed, changed=on_event, restarted=self._restarted, failed=self._failed),
            name="gitsyncs",
            api_version=gitsync.API_VERSION,
            kind=gitsync.KIND,
            watch_client=watch_client,
        )

    def run(self) -> None:
        self.loop.run()

    def stop(self) -> None:
        self.loop.stop()

    def _listed(self, items: list[Manifest], resource_version: str) -> None:
        seen = set()
        for obj in items:
            meta = obj.get("metadata") or {}
            seen.add(f"{meta.get('namespace')}/{meta.get('name')}")
            self.on_event("ADDED", obj)
        for ref in [ref for ref in self.known() if ref not in seen]:
            ns, name = ref.split("/", 1)
            self.on_event("DELETED", {"metadata": {"namespace": ns, "name": name}})
        self.on_listed()

    def _restarted(self, reason: str) -> None:
        if reason == "gone":  # 410 Gone (resourceVersion too old)
            log.warning("GitSync watch expired; relisting")

    def _failed(self, exc: Exception) -> Retry:
        if isinstance(exc, ApiError) and exc.status == 404:
            log.error("the GitSync CRD is not installed (kubectl apply -k deploy/kubernetes/crd/)")
        else:
            log.warning("GitSync watch failed; relisting", error=mask_url(str(exc)))
        return BACKOFF


__all__ = ["GitSyncWatch"]
