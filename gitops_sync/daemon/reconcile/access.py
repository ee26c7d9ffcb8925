"""May a tenant's ServiceAccount read what its source declares? Impersonated SelfSubjectAccessReviews.

A GitSync with `serviceAccountName` writes as its ServiceAccount, but its passes plan from the
controller's shared watch cache, read with the controller's rights. Before a cached live object of such a
source is used (planned, diffed, reported, observed for fights), `ReadAccess.refused` asks the API server,
as that ServiceAccount, whether it may `get` it. What it may not read is planned as a `forbidden` entry
with no live values (reconciler.py hands the refusals to `Engine.run`). Answers are cached per
(group, resource, namespace[, name]) with a short TTL in a bounded LRU; an API error is never cached and
refuses (fail closed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.runtime.auth import TtlCache
from gitops_sync.errors import ClusterError
from gitops_sync.log import get_logger
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey

log = get_logger(__name__)

SELF_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

_Scope = tuple[str, str, str, str]  # (group, resource, namespace, name): name "" = any object there


def forbidden_message(user: str, resource: str, group: str, namespace: str, name: str, verb: str = "get") -> str:
    """The API server's own wording of a refusal (as the forbidden write's entry shows it)."""
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    return (
        f'403 Forbidden: {resource} "{name}" is forbidden: User "{user}" cannot {verb} resource '
        f'"{resource}" in API group "{group}"{where}'
    )


class ReadAccess:
    """`refused(targets)`: {key: message} for the targets `user` may not `get`.

    `client` must send every request as `user` (Impersonate-User): the review is then the API server's
    own answer for that user with all its groups, by whatever authorizer the cluster runs.
    """

    def __init__(
        self,
        client: Client,
        user: str,
        *,
        ttl: float = 30.0,
        denied_ttl: float = 10.0,
        size: int = 512,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.user = user
        self.ttl = ttl
        self.denied_ttl = denied_ttl
        self.timeout = timeout
        self._answers: TtlCache[_Scope, bool] = TtlCache(size, clock)
        self.reviews = 0  # reviews sent (a figure for tests and /status)

    def refused(self, targets: Sequence[Target]) -> dict[ObjectKey, str]:
        out: dict[ObjectKey, str] = {}
        for t in targets:
            group, resource, ns = t.info.group, t.info.plural, t.key.namespace
            try:
                # A namespace-wide grant answers every object there; a refusal may still hide a grant
                # on this very name (resourceNames), so only then is the object itself asked about.
                ok = self._allowed((group, resource, ns, "")) or self._allowed((group, resource, ns, t.key.name))
            except ClusterError as exc:
                log.warning("cannot review read access; refusing", object=str(t.key), user=self.user, error=str(exc))
                out[t.key] = f"cannot check that {self.user} may get {resource} {t.key.name!r}: {exc}"
                continue
            if not ok:
                out[t.key] = forbidden_message(self.user, resource, group, ns, t.key.name)
        return out

    def _allowed(self, scope: _Scope) -> bool:
        cached = self._answers.get(scope)
        if cached is not None:
            return cached
        group, resource, namespace, name = scope
        attrs: dict[str, Any] = {"verb": "get", "group": group, "resource": resource}
        if namespace:
            attrs["namespace"] = namespace
        if name:
            attrs["name"] = name
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs},
        }
        self.reviews += 1
        answer = self.client.request("POST", SELF_ACCESS_REVIEWS, body=body, timeout=self.timeout)
        status = (answer if isinstance(answer, dict) else {}).get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        self._answers.put(scope, allowed, self.ttl if allowed else self.denied_ttl)
        return allowed


__all__ = ["ReadAccess", "forbidden_message"]
