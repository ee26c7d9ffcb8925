"""Typed errors. Every error the CLI turns into exit code 2 derives from GitOpsError.

Messages must name the file, object or host concerned, so a user can act without a traceback.
"""

from __future__ import annotations

from gitops_sync.formatting import truncate

# The longest message a RenderError carries (its file and object come on top): whatever a file quotes
# into it (a key, an entry, a tool's output) cannot make a one-line error megabytes long.
MAX_RENDER_MESSAGE = 4000


class GitOpsError(Exception):
    """Base of every expected failure (exit code 2)."""


class SourceError(GitOpsError):
    """The Git repository or local path cannot be read (unreachable remote, unknown revision, ...)."""


class RepositoryNotAllowed(SourceError):
    """A fleet source names a local path (or `file://` URL) outside the allow-list, or the clone cache."""

    reason = "RepositoryNotAllowed"  # of the GitSync's Ready condition and Event: what a script matches


class CredentialsUnavailable(SourceError):
    """A GitSync's spec.secretRef cannot be used: not found, not readable as its ServiceAccount, or missing a
    key. The message names the Secret and why, never a value."""

    reason = "CredentialsUnavailable"  # of the GitSync's Ready condition and Event: what a script matches


class RenderError(GitOpsError):
    """The manifests cannot be turned into objects (invalid YAML, missing kind, duplicates, ...)."""

    def __init__(self, message: str, *, file: str | None = None, obj: str | None = None) -> None:
        where = ", ".join(p for p in (file, obj) if p)
        message = truncate(message, MAX_RENDER_MESSAGE)
        super().__init__(f"{where}: {message}" if where else message)
        self.file = file
        self.obj = obj


class DecryptionFailed(RenderError):
    """A SOPS-encrypted file does not decrypt (no key fits, its MAC does not verify, no key was given), or a
    GitSync's spec.decryption Secret cannot be used. The message names the file (or Secret) and why, never a
    value."""

    reason = "DecryptionFailed"  # of the GitSync's Ready condition and Event: what a script matches


class ChartRepositoryNotAllowed(RenderError):
    """A helm-chart.yaml or Chart.yaml dependency names a chart repository the operator does not allow
    (--allow-chart-repository, or an entry of the chart credentials file): nothing is fetched from it."""

    reason = "ChartRepositoryNotAllowed"  # of the GitSync's Ready condition and Event: what a script matches


class ClusterError(GitOpsError):
    """The API server cannot be reached or answered with an unexpected error."""


class ApiUnavailableError(ClusterError):
    """The request was NOT sent: the API server is known down (a failed health probe) or the deadline passed.

    Safe to report as "not attempted": nothing about the object changed because of this request.
    """


class FencedError(ApiUnavailableError):
    """A write NOT sent because this process may not write now: not the leader (its Lease renewal overdue),
    not the shard's holder, detect-only, or shutting down. Raised by the early check and by the last one,
    made in the HTTP connection right before the request's bytes go to the socket (cluster/wire.py)."""


class ApiTimeoutError(ClusterError):
    """The request was sent but no answer came in time: whether a write took effect is unknown."""


class ApiError(ClusterError):
    """A non-2xx answer from the API server, with the decoded Status body when there is one.

    The base of one class per status (`error_for_status` picks it), so `except ApiError` still catches all
    of them. `method` and `path` name the request (the object); `body` is the cause as the server gave it.
    """

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        body: dict[str, object] | None = None,
        *,
        method: str = "",
        path: str = "",
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.body = body or {}
        self.method = method
        self.path = path


class UnauthorizedError(ApiError):
    """401: no or an invalid credential."""


class ForbiddenError(ApiError):
    """403: RBAC refuses this verb on this resource (a namespaced install listing cluster-wide, ...)."""


class NotFoundError(ApiError):
    """404: the object (or its namespace, or its kind) does not exist."""


class ConflictError(ApiError):
    """409: a field-manager conflict (with causes) or a resourceVersion precondition failure."""


class GoneError(ApiError):
    """410: the resourceVersion a list or watch resumes from was compacted away; only a fresh list helps."""


class InvalidError(ApiError):
    """422: the object fails validation (the causes name the fields)."""


class TooManyRequestsError(ApiError):
    """429: throttled (API priority and fairness); worth a retry later."""


class ServerError(ApiError):
    """5xx: the API server (or a webhook it called) failed; worth a retry later."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    422: InvalidError,
    429: TooManyRequestsError,
}


def error_for_status(
    status: int,
    reason: str,
    message: str,
    body: dict[str, object] | None = None,
    *,
    method: str = "",
    path: str = "",
) -> ApiError:
    """The ApiError subclass for an HTTP status (any other 4xx: ApiError itself)."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(status, reason, message, body, method=method, path=path)


class SourceMismatchError(GitOpsError):
    """An inventory parent records another source: using it would let one source prune the other's objects."""

    def __init__(self, message: str, *, inventory: str, recorded: str, ours: str) -> None:
        super().__init__(message)
        self.inventory = inventory
        self.recorded = recorded
        self.ours = ours


class InventoryChangedError(ClusterError):
    """The inventory parent was written by another pass since this one read it: not written over, no prune."""


class WaitTimeoutError(GitOpsError):
    """Objects did not become healthy before --timeout."""


class LeaseError(GitOpsError):
    """The source's Lease could not be taken before a write (held past --lock-timeout, refused, unreachable).

    Raised before the pass's first write request leaves, so nothing of the pass was written."""


class NewerRevisionError(GitOpsError):
    """The inventory records a newer commit of this source than the one a `sync` would apply."""
