"""What went wrong in a source's last pass, said the same way in its status, `gitops-sync get` and its Events.

The first real error is the one people need: a tenant's ConfigMap refused with `403 Forbidden` is the cause,
"prune skipped: some objects failed" only its consequence (`changeset.Consequence`, never the headline and
never counted again). Each failed object is named with its file, the API server's status and its message;
a bounded list of them goes into the GitSync's `status.errors`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitops_sync.plan.changeset import PRUNE_REFUSED, Action, Consequence, Entry
from gitops_sync.resource import ObjectKey

MAX_ERRORS = 10  # per-object errors kept in status.errors (`gitops-sync get -o json`); the count has them all

# The reasons of a failed pass (Ready=False), for scripts to match.
APPLY_FAILED = "ApplyFailed"  # an object Git declares could not be applied
PRUNE_FAILED = "PruneFailed"  # an object that left Git could not be deleted (or its members not listed)
RECONCILE_FAILED = "ReconcileFailed"  # the pass failed as a whole (no object to blame)
# A retry alone cannot fix these: RBAC, Git or the cluster must change first (kstatus: Stalled).
_NEEDS_A_CHANGE = frozenset({400, 403, 422})


@dataclass(frozen=True)
class Failure:
    """One object that failed: what, where in Git, and the API server's answer."""

    object: str
    file: str
    status: int
    reason: str
    message: str

    @classmethod
    def of(cls, e: Entry) -> Failure:
        return cls(str(e.key), e.origin, e.status, e.reason, e.message)

    def text(self) -> str:
        """`ConfigMap/team-b/x (x.yaml#1): 403 Forbidden: configmaps "x" is forbidden: ...`"""
        where = f" ({self.file})" if self.file else ""
        answer = f"{self.status} {self.reason}: "
        message = self.message if not self.status or self.message.startswith(answer) else answer + self.message
        return f"{self.object}{where}: {message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "object": self.object,
            "file": self.file,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
        }


@dataclass
class Failures:
    """The failures of a pass (or of a source's latest picture): the first, the count, a reason."""

    objects: list[Failure] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # pass-level errors, causes first, consequences last
    count: int = 0  # failed objects + pass errors that are causes: each failure once
    reason: str = ""  # APPLY_FAILED, PRUNE_FAILED, PRUNE_REFUSED or RECONCILE_FAILED ("" when none)
    stalled: bool = False  # every failure needs a change before a retry can succeed

    def __bool__(self) -> bool:
        return bool(self.objects or self.errors)

    @property
    def first(self) -> str:
        """The headline: the first failed object, else the first pass error (a cause before a consequence)."""
        if self.objects:
            return self.objects[0].text()
        return self.errors[0] if self.errors else ""

    def summary(self) -> str:
        """The first failure, and how many more: the Ready message and the Event of a failed pass."""
        more = self.count - 1
        return self.first + (f" (and {more} more error(s))" if more > 0 else "")

    def to_list(self) -> list[dict[str, Any]]:
        return [f.to_dict() for f in self.objects[:MAX_ERRORS]]


def failures_of(entries: Iterable[Entry], pass_errors: Sequence[str], desired: Collection[ObjectKey]) -> Failures:
    """What failed, from a pass's entries and errors. `desired`: the keys Git declares (an error on any other
    object is a prune's)."""
    failed = [e for e in entries if e.action is Action.ERROR]
    causes = [e for e in pass_errors if not isinstance(e, Consequence)]
    out = Failures(
        objects=[Failure.of(e) for e in failed],
        errors=[*causes, *(e for e in pass_errors if isinstance(e, Consequence))],
        count=len(failed) + len(causes),
    )
    if not out:
        return out
    first = failed[0] if failed else None
    if first is None:
        out.reason = RECONCILE_FAILED
    elif first.reason == PRUNE_REFUSED:
        out.reason = PRUNE_REFUSED
    elif first.key not in desired:
        out.reason = PRUNE_FAILED
    else:
        out.reason = APPLY_FAILED
    out.stalled = not causes and all(e.status in _NEEDS_A_CHANGE or e.reason == PRUNE_REFUSED for e in failed)
    return out


__all__ = [
    "APPLY_FAILED",
    "MAX_ERRORS",
    "PRUNE_FAILED",
    "RECONCILE_FAILED",
    "Failure",
    "Failures",
    "failures_of",
]
