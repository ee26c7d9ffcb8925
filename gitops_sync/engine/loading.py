"""Source loading: fetch a commit and render it, before anything touches the cluster.

The desired objects go to `Engine.resolve` (then `Engine.run`); a SourceError or RenderError raised here
ends the command or the daemon's pass before any request is sent.
"""

from __future__ import annotations

from dataclasses import replace

from gitops_sync.engine.options import SourceOptions
from gitops_sync.render import render
from gitops_sync.rendercache import DiskStore, RenderCache
from gitops_sync.resource import DesiredObject
from gitops_sync.source import Checkout, fetch
from gitops_sync.source.checkout import cache_root
from gitops_sync.source.verify import verify_checkout


def fetch_source(source: SourceOptions) -> Checkout:
    """The source's directory and commit (raises SourceError, RepositoryNotAllowed under its local policy)."""
    return fetch(
        source.repo,
        source.revision,
        source.path,
        cache_dir=source.cache_dir,
        timeout=source.timeout,
        local_policy=source.local_policy,
        credentials=source.credentials() if source.credentials is not None else None,
    )


def load(source: SourceOptions, cache: RenderCache | None = None) -> tuple[Checkout, list[DesiredObject]]:
    """Fetch and render; raises SourceError/RenderError before anything touches the cluster.

    `cache`: renders of a commit already rendered are served from it (gitops_sync.rendercache)."""
    checkout = fetch_source(source)
    if source.verify is not None:  # before the render: an unverified commit is never rendered nor applied
        checkout = replace(checkout, signer=verify_checkout(checkout, source.verify))
    # The repository top (not --path) bounds symlinks and anchors relative --helm-values paths; a submodule
    # whose files are not there is never rendered as an empty directory.
    opts = replace(source.render, repo_root=checkout.repo_root or checkout.root, holes=checkout.holes)
    if opts.chart_cache is None:  # charts from repositories (helm-chart.yaml) are kept by digest beside the clones
        opts = replace(opts, chart_cache=cache_root(source.cache_dir))
    if cache is None:
        return checkout, render(checkout.root, opts)
    return checkout, cache.render(checkout, opts, render)


def disk_render_cache(source: SourceOptions) -> RenderCache:
    """The CLI's render cache: in the clone cache directory, next to the repositories' clones."""
    return RenderCache(DiskStore(cache_root(source.cache_dir) / "renders"))
