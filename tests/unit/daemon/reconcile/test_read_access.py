"""ReadAccess: answers cached per (group, resource, namespace), refusals fail closed, never cached errors."""

from __future__ import annotations

from typing import Any

from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.daemon.reconcile.access import ReadAccess
from gitops_sync.errors import ServerError
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey
from tests.unit.fakes import FakeClock

CM = ResourceInfo("", "v1", "ConfigMap", "configmaps", True)


def _target(ns: str, name: str) -> Target:
    return Target(ObjectKey("", "ConfigMap", ns, name), CM, {}, "x.yaml")


class _Reviews:
    """Answers SelfSubjectAccessReviews as an authorizer would: namespaces and names that are allowed."""

    def __init__(self, allowed: set[tuple[str, str]]) -> None:
        self.allowed = allowed
        self.asked: list[dict[str, Any]] = []
        self.fail = False

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if self.fail:
            raise ServerError(500, "InternalError", "etcd is away")
        attrs = kwargs["body"]["spec"]["resourceAttributes"]
        self.asked.append(attrs)
        ok = (attrs["namespace"], attrs.get("name", "")) in self.allowed
        return {"status": {"allowed": ok}}


def test_refusals_are_cached_and_worded_as_the_api_server_does() -> None:
    clock = FakeClock()
    reviews = _Reviews({("mine", ""), ("theirs", "granted")})
    access = ReadAccess(reviews, "system:serviceaccount:mine:tenant", clock=clock)  # type: ignore[arg-type]
    targets = [_target("mine", "a"), _target("mine", "b"), _target("theirs", "granted"), _target("theirs", "c")]
    refused = access.refused(targets)
    assert list(refused) == [targets[3].key]
    assert refused[targets[3].key] == (
        '403 Forbidden: configmaps "c" is forbidden: User "system:serviceaccount:mine:tenant" cannot get '
        'resource "configmaps" in API group "" in the namespace "theirs"'
    )
    first = len(reviews.asked)
    assert first == 4  # mine (once for both), theirs, theirs/granted, theirs/c
    access.refused(targets)
    assert len(reviews.asked) == first  # within the TTL: no new review
    clock.advance(11)  # refusals expire first (10 s), grants later (30 s)
    access.refused(targets)
    assert len(reviews.asked) == first + 2


def test_a_review_that_fails_refuses_and_is_asked_again() -> None:
    reviews = _Reviews({("mine", "")})
    access = ReadAccess(reviews, "u")  # type: ignore[arg-type]
    reviews.fail = True
    refused = access.refused([_target("mine", "a")])
    assert "cannot check" in next(iter(refused.values()))
    reviews.fail = False
    assert access.refused([_target("mine", "a")]) == {}
