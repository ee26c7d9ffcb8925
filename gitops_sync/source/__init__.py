"""Where the desired state comes from: a Git remote, a local work tree or a plain directory."""

from gitops_sync.source.checkout import Checkout, fetch, mask_url, short_revision

__all__ = ["Checkout", "fetch", "mask_url", "short_revision"]
