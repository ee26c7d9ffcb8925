"""The GitSync objects as the fleet sees them, through the runtime's one list/watch loop (listwatch.py):
list, then watch; relist after a 410 or a broken watch.

Runs on the `gitsync-watch` thread; every event goes to the controller's handler (controller.py
`_gitsync_event`, one at a time, in order); a list also reports the GitSyncs gone meanwhile as DELETED.
Before a list's GitSyncs are handled, and whenever the watch begins again (a changed CRD ends it), the
installed CRD is checked (crd.py): one that would prune a field the controller reads ends the loop and
`on_fatal` stops the controller, before it acts on a GitSync that lost a field.
"""

from __future__ import annotations

from collections.abc import Callable

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.crd import CrdOutdated, SpecSchema
from gitops_sync.daemon.runtime.listwatch import BACKOFF, STOP, Callbacks, ListWatch, Retry
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
        on_fatal: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.on_event = on_event
        self.on_fatal = on_fatal
        self.schema = SpecSchema(client)
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
        self.schema.check()  # raises before any of them is handled
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
        elif reason == "closed":  # the watch goes on from its version (no list): the CRD may have changed
            self.schema.check()

    def _failed(self, exc: Exception) -> Retry:
        if isinstance(exc, CrdOutdated):
            log.error("GitSync CRD outdated: stopping", error=str(exc))
            self.on_fatal(str(exc))
            return STOP
        if isinstance(exc, ApiError) and exc.status == 404:
            log.error("the GitSync CRD is not installed (kubectl apply -k deploy/kubernetes/crd/)")
        else:
            log.warning("GitSync watch failed; relisting", error=mask_url(str(exc)))
        return BACKOFF


__all__ = ["GitSyncWatch"]
