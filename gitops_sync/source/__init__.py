"""Where the desired state comes from: a Git remote, a local work tree or a plain directory."""

from gitops_sync.source.checkout import Checkout, fetch, mask_url, short_revision
from gitops_sync.source.identity import SourceIdentity, identify

__all__ = ["Checkout", "SourceIdentity", "fetch", "identify", "mask_url", "short_revision"]
