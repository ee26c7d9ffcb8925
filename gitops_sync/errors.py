"""Typed errors. Every error the CLI turns into exit code 2 derives from GitOpsError.

Messages must name the file, object or host concerned, so a user can act without a traceback.
"""

from __future__ import annotations


class GitOpsError(Exception):
    """Base of every expected failure (exit code 2)."""


class SourceError(GitOpsError):
    """The Git repository or local path cannot be read (unreachable remote, unknown revision, ...)."""


class RenderError(GitOpsError):
    """The manifests cannot be turned into objects (invalid YAML, missing kind, duplicates, ...)."""

    def __init__(self, message: str, *, file: str | None = None, obj: str | None = None) -> None:
        where = ", ".join(p for p in (file, obj) if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.file = file
        self.obj = obj


class ClusterError(GitOpsError):
    """The API server cannot be reached or answered with an unexpected error."""


class ApiUnavailableError(ClusterError):
    """The request was NOT sent: the API server is known down (a failed health probe) or the deadline passed.

    Safe to report as "not attempted": nothing about the object changed because of this request.
    """


class ApiTimeoutError(ClusterError):
    """The request was sent but no answer came in time: whether a write took effect is unknown."""


class ApiError(ClusterError):
    """A non-2xx answer from the API server, with the decoded Status body when there is one."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, object] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.body = body or {}


class NotFoundError(ApiError):
    pass


class ConflictError(ApiError):
    """409: a field-manager conflict (with causes) or a resourceVersion precondition failure."""


class SourceMismatchError(GitOpsError):
    """An inventory parent records another source: using it would let one source prune the other's objects."""

    def __init__(self, message: str, *, inventory: str, recorded: str, ours: str) -> None:
        super().__init__(message)
        self.inventory = inventory
        self.recorded = recorded
        self.ours = ours


class WaitTimeoutError(GitOpsError):
    """Objects did not become healthy before --timeout."""
