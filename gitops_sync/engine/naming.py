"""Naming a source: its label in reports (`url//sub@ref`), its identity, and its inventory's name.

Every report carries these, a failed one too; the inventory name is where `Engine.run` records the pass.
"""

from __future__ import annotations

import posixpath

from gitops_sync.engine.options import PassOptions
from gitops_sync.source import Checkout, SourceIdentity, identify, mask_url
from gitops_sync.source.checkout import is_remote


def default_inventory_name(repo: str, path: str | None) -> str:
    """The inventory name of a source without --name: readable prefix + hash of its whole identity."""
    return identify(repo, path).inventory_name()


def inventory_of(checkout: Checkout, opts: PassOptions) -> tuple[str, str, str]:
    """(name, namespace, source identity) of the inventory a pass uses: for every report, even a failed one."""
    name = opts.name or source_identity(checkout).inventory_name()
    return name, opts.inventory_namespace or opts.namespace, source_identity(checkout).text


def source_identity(checkout: Checkout) -> SourceIdentity:
    """The identity `fetch` derived; for a Checkout built by hand, derived from its repo and sub-directory."""
    return checkout.identity or identify(checkout.repo, sub_path(checkout))


def sub_path(checkout: Checkout) -> str | None:
    """The rendered sub-directory (`--path`), normalised, or None for the repository top."""
    if checkout.repo_root is None or checkout.root == checkout.repo_root:
        return None
    return checkout.root.relative_to(checkout.repo_root).as_posix()


def checkout_label(checkout: Checkout) -> str:
    """The source label of a fetched commit (see `source_label`)."""
    return source_label(checkout.repo, sub_path(checkout), checkout.ref)


def source_label(repo: str, sub: str | None, ref: str | None = None) -> str:
    """`url[//sub/dir][@ref]` (the kustomize spelling) for a remote; the joined, normalised path for a
    local one (`.` + `clusters/prod` is `clusters/prod`, never `.//clusters/prod`). Credentials masked."""
    sub = posixpath.normpath(sub.strip("/")) if sub and sub.strip("/") else ""
    sub = "" if sub == "." else sub
    if repo.startswith("oci://"):  # an OCI artifact: its tag or digest is already in the URL
        return mask_url(repo) + (f"//{sub}" if sub else "")
    if is_remote(repo):
        label = mask_url(repo.rstrip("/")) + (f"//{sub}" if sub else "")
    else:
        label = posixpath.normpath(posixpath.join(repo or ".", sub)) if sub else posixpath.normpath(repo or ".")
    return f"{label}@{ref}" if ref else label
