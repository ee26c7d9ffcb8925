"""Source loading: fetch a commit and render it, before anything touches the cluster.

The desired objects go to `Engine.resolve` (then `Engine.run`); a SourceError or RenderError raised here
ends the command or the daemon's pass before any request is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gitops_sync.engine.hooks import split as split_hooks
from gitops_sync.engine.options import SourceOptions
from gitops_sync.errors import ChartRepositoryNotAllowed, RenderError, SourceError
from gitops_sync.render import artifact, charts, render
from gitops_sync.rendercache import DiskStore, RenderCache
from gitops_sync.resource import DesiredObject
from gitops_sync.source import Checkout, fetch, identify
from gitops_sync.source.checkout import cache_root
from gitops_sync.source.verify import verify_checkout


def fetch_source(source: SourceOptions) -> Checkout:
    """The source's directory and commit (raises SourceError, RepositoryNotAllowed under its local policy);
    an `oci://` source is an OCI artifact, its manifest digest the revision (render/artifact.py)."""
    source = with_chart_credentials(source)
    if source.repo.startswith("oci://"):
        return _fetch_artifact(source)
    return fetch(
        source.repo,
        source.revision,
        source.path,
        cache_dir=source.cache_dir,
        timeout=source.timeout,
        local_policy=source.local_policy,
        credentials=source.credentials() if source.credentials is not None else None,
    )


def _fetch_artifact(source: SourceOptions) -> Checkout:
    """The artifact's manifests as a Checkout at revision `sha256:<manifest digest>`. Who named it decides
    whether it may be fetched: `--repo` on the command line (CLI, `run --repo`) is the operator's choice; a
    GitSync's is the tenant's, held to --allow-chart-repository (render.chart_repositories)."""
    opts = source.render
    ref = artifact.parse(source.repo)
    entries = opts.chart_entries()
    own = (ref.repository,) if opts.chart_credentials_env else ()
    access = charts.access_for(ref.repository, entries, (*opts.chart_repositories, *own))
    try:
        tree, digest = artifact.pull(source.repo, access, cache_root(source.cache_dir))
    except ChartRepositoryNotAllowed:
        raise  # its reason is what a GitSync's Ready condition names
    except RenderError as err:
        raise SourceError(str(err)) from None
    root = tree / source.path if source.path else tree
    if not root.resolve().is_relative_to(tree.resolve()) or not root.is_dir():
        raise SourceError(f"{source.repo}: --path {source.path} is not a directory of the artifact")
    identity = identify(ref.repository, source.path)
    return Checkout(root=root, revision=digest, repo=source.repo, ref=ref.reference, repo_root=tree, identity=identity)


def load(
    source: SourceOptions, cache: RenderCache | None = None, held: Callable[[str, str], bool] | None = None
) -> tuple[Checkout, list[DesiredObject]]:
    """Fetch and render; raises SourceError/RenderError before anything touches the cluster.

    `cache`: renders of a commit already rendered are served from it (gitops_sync.rendercache); `held`: see
    `RenderCache.render` (rendercache.Unchanged when the caller holds the entry already)."""
    source = with_chart_credentials(source)
    keys = source.verify() if callable(source.verify) else source.verify  # a Secret's: read before each fetch
    checkout = fetch_source(source)
    if keys is not None:  # before the render: an unverified commit is never rendered nor applied
        checkout = replace(checkout, signer=verify_checkout(checkout, keys))
    # The repository top (not --path) bounds symlinks and anchors relative --helm-values paths; a submodule
    # whose files are not there is never rendered as an empty directory.
    opts = replace(source.render, repo_root=checkout.repo_root or checkout.root, holes=checkout.holes)
    if source.decryption is not None:  # a GitSync's key Secret, read for this render (DecryptionFailed)
        opts = replace(opts, decryption=source.decryption())
    if opts.chart_cache is None:  # charts from repositories (helm-chart.yaml) are kept by digest beside the clones
        opts = replace(opts, chart_cache=cache_root(source.cache_dir))
    objects = render(checkout.root, opts) if cache is None else cache.render(checkout, opts, render, held)
    plain, hooks = split_hooks(objects)  # helm.sh/hook objects run as phases of a pass, never applied as objects
    return replace(checkout, charts=pulled_charts(objects), hooks=tuple(hooks)), plain


def with_chart_credentials(source: SourceOptions) -> SourceOptions:
    """`source` with its chart credentials read once for this pass (into render.chart_access); unchanged when
    it has none to read. Raises what reading them raises (a GitSync's CredentialsUnavailable)."""
    if source.chart_credentials is None:
        return source
    render = replace(source.render, chart_access=(*source.render.chart_access, *source.chart_credentials()))
    return replace(source, render=render, chart_credentials=None)


def pulled_charts(objects: list[DesiredObject]) -> tuple[dict[str, str], ...]:
    """The charts pulled for these objects (helm-chart.yaml sources, then Chart.yaml dependencies), once each,
    sorted: what reports and /status name (repository, chart, resolved version, archive digest)."""
    found: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for obj in objects:
        for chart in [obj.extra.get("chart"), *(obj.extra.get("chart_dependencies") or [])]:
            if isinstance(chart, dict):
                found.setdefault(tuple(sorted((str(k), str(v)) for k, v in chart.items())), dict(chart))
    return tuple(found[k] for k in sorted(found))


def disk_render_cache(source: SourceOptions) -> RenderCache:
    """The CLI's render cache: in the clone cache directory, next to the repositories' clones."""
    return RenderCache(DiskStore(cache_root(source.cache_dir) / "renders"))
