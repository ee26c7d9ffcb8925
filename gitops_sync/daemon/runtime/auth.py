"""Who may read /status and /metrics: a bearer token checked the Kubernetes way.

As controller-runtime's secure metrics filter and kube-rbac-proxy do: the token goes to the API server
in a TokenReview (authentication.k8s.io/v1), the user it names to a SubjectAccessReview
(authorization.k8s.io/v1) for the non-resource URL (`path`, verb `get`). Both answers are cached briefly
in bounded caches keyed by digests (a token or a path of 64 KiB costs 32 bytes), so a scraper costs two
API requests per token and path per TTL, not per scrape.
An API server that cannot answer gives 503, never 200. The HTTP server (http.py) calls `check` before
it asks the daemon for anything; tokens are kept only as SHA-256 digests and never logged.
A fleet's web page asks more of an authenticated user: may it `get` this GitSync? (`Decision.may`: a
SubjectAccessReview with resource attributes, cached alike), so each tenant sees only its own.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gitops_sync.cluster.client import Client
from gitops_sync.errors import ForbiddenError, GitOpsError, UnauthorizedError
from gitops_sync.log import get_logger

log = get_logger(__name__)

AUTH_MODES = ("none", "kubernetes")
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


# (verb, group, resource, namespace, name) of a resource request; name "" = any object of the namespace
Resource = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class Decision:
    """The answer for one request: 200 lets it through; 401, 403 or 503 is sent as it is.

    `may(resource)` (for an authenticated user, whatever the path's answer): may this user do that? A
    SubjectAccessReview, cached; raises GitOpsError when the API server cannot answer. None: nobody to ask."""

    status: int
    reason: str
    user: str = ""
    may: Callable[[Resource], bool] | None = field(default=None, compare=False, repr=False)


# (path, Authorization header) -> Decision; the path "" asks only who the token is (TokenReview)
Authorizer = Callable[[str, str | None], Decision]


@dataclass(frozen=True)
class _User:
    name: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]


class TtlCache(Generic[K, V]):
    """A thread-safe LRU of at most `size` entries that each expire `ttl` seconds after they were put."""

    def __init__(self, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self._clock = clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            if hit[0] <= self._clock():
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return hit[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        with self._lock:
            self._items[key] = (self._clock() + ttl, value)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class KubernetesAuth:
    """`check(path, authorization)`: TokenReview, then SubjectAccessReview for `get` on `path`.

    Allowed and unauthenticated answers are cached for `ttl` seconds, denials for `denied_ttl` (so a
    new RoleBinding takes effect quickly); API errors are never cached. A token is never sent anywhere
    but the API server, and only its digest is kept.
    """

    def __init__(
        self,
        client: Client,
        *,
        ttl: float = 30.0,
        denied_ttl: float = 10.0,
        size: int = 1024,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.denied_ttl = denied_ttl
        self.timeout = timeout
        self._users: TtlCache[str, tuple[_User | None]] = TtlCache(size, clock)  # 1-tuple: None is an answer
        # keyed by the path's digest: the path comes from the request line (up to 64 KiB each)
        self._access: TtlCache[tuple[_User, bytes], tuple[bool, str]] = TtlCache(size, clock)

    def check(self, path: str, authorization: str | None) -> Decision:
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Decision(401, "a bearer token is required (Authorization: Bearer <token>)")
        try:
            user = self._authenticate(token)
            if user is None:
                return Decision(401, "the token is not valid (TokenReview: not authenticated)")
            may = functools.partial(self._may, user)
            if not path:
                return Decision(200, "ok", user.name, may)
            allowed, why = self._authorize(user, path)
        except GitOpsError as exc:
            log.warning("http auth: the API server did not answer a review", path=path, error=str(exc))
            return Decision(503, f"cannot check the token now: {exc}")
        if not allowed:
            extra = f" ({why})" if why else ""
            return Decision(403, f'user "{user.name}" may not get {path}{extra}', user.name, may)
        return Decision(200, "ok", user.name, may)

    def _authenticate(self, token: str) -> _User | None:
        key = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
        cached = self._users.get(key)
        if cached is not None:
            return cached[0]
        review = self._create(
            TOKEN_REVIEWS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        status = review.get("status") or {}
        user: _User | None = None
        if status.get("authenticated"):
            info = status.get("user") or {}
            extra = info.get("extra") or {}
            user = _User(
                name=str(info.get("username") or ""),
                uid=str(info.get("uid") or ""),
                groups=tuple(str(g) for g in info.get("groups") or ()),
                extra=tuple(sorted((str(k), tuple(str(v) for v in vs or ())) for k, vs in extra.items())),
            )
        self._users.put(key, (user,), self.ttl if user is not None else self.denied_ttl)
        return user

    def _authorize(self, user: _User, path: str) -> tuple[bool, str]:
        return self._review(user, path, {"nonResourceAttributes": {"path": path, "verb": "get"}})

    def _may(self, user: _User, resource: Resource) -> bool:
        verb, group, plural, namespace, name = resource
        attrs = {"verb": verb, "group": group, "resource": plural}
        attrs.update({k: v for k, v in (("namespace", namespace), ("name", name)) if v})
        # "\0" cannot start a path: a resource question never shares a cache entry with a path's
        return self._review(user, "\0" + "\0".join(resource), {"resourceAttributes": attrs})[0]

    def _review(self, user: _User, question: str, attributes: dict[str, Any]) -> tuple[bool, str]:
        key = (user, hashlib.sha256(question.encode("utf-8", "replace")).digest())
        cached = self._access.get(key)
        if cached is not None:
            return cached
        review = self._create(
            ACCESS_REVIEWS,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user.name,
                    "uid": user.uid,
                    "groups": list(user.groups),
                    "extra": {k: list(v) for k, v in user.extra},
                    **attributes,
                },
            },
        )
        status = review.get("status") or {}
        answer = (
            bool(status.get("allowed")) and not status.get("denied"),
            str(status.get("reason") or status.get("evaluationError") or ""),
        )
        self._access.put(key, answer, self.ttl if answer[0] else self.denied_ttl)
        return answer

    def _create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = self.client.request("POST", path, body=body, timeout=self.timeout)
        except (UnauthorizedError, ForbiddenError) as exc:
            raise GitOpsError(
                f"the daemon may not create {path.rsplit('/', 1)[-1]} (HTTP {exc.status}): "
                "its ServiceAccount needs the gitops-sync-auth ClusterRole "
                "(deploy/kubernetes)"
            ) from exc
        return answer if isinstance(answer, dict) else {}
