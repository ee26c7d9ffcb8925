"""The API server as plain JSON: one client (requests, timeouts, the down-server breaker) and discovery.

Everything that talks to the cluster goes through `Client`; `Discovery` tells `plan` which URL, scope and
version serve a kind. Answers go up as dicts; failures as typed `ClusterError`s (gitops_sync.errors).
"""

from gitops_sync.cluster.client import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    Client,
    Listing,
    RequestStats,
    object_path,
)
from gitops_sync.cluster.discovery import Discovery, ResourceInfo

__all__ = [
    "APPLY_PATCH",
    "JSON_PATCH",
    "MERGE_PATCH",
    "Client",
    "Discovery",
    "Listing",
    "RequestStats",
    "ResourceInfo",
    "object_path",
]
