"""What a pass is asked to do: where its source is (`SourceOptions`) and how it treats the cluster
(`PassOptions`). The CLI's flags and a GitSync's spec become these; `loading` and `Engine.run` read them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gitops_sync.apply import cascade
from gitops_sync.conventions import ConflictPolicy
from gitops_sync.plan import ignore
from gitops_sync.render import RenderOptions
from gitops_sync.render.charts import RepositoryAccess
from gitops_sync.render.sops import Decryption
from gitops_sync.source.allow import LocalRepositories
from gitops_sync.source.credentials import GitCredentials
from gitops_sync.source.verify import TrustedKeys


@dataclass
class SourceOptions:
    repo: str
    revision: str | None = None
    path: str | None = None
    cache_dir: Path | None = None
    render: RenderOptions = field(default_factory=RenderOptions)
    timeout: float = 60.0  # seconds for each git command (fetch, checkout)
    # The fleet's rule for local paths and file:// URLs (source/allow.py); None: any path (the CLI's own).
    local_policy: LocalRepositories | None = None
    # Git credentials beyond the URL's own, asked for on every fetch (a rotated Secret is read again):
    # the CLI's flags (a constant), a GitSync's spec.secretRef (read as its ServiceAccount). None: none.
    credentials: Callable[[], GitCredentials | None] | None = field(default=None, compare=False, repr=False)
    # --verify-commits / --verify-tag: signed by one of these keys before it is rendered (source/verify.py);
    # a GitSync's spec.verify: what reads its Secret, at every fetch (a rotated key is used at once).
    verify: TrustedKeys | Callable[[], TrustedKeys] | None = field(default=None, compare=False, repr=False)
    # SOPS keys asked for before every render (a rotated Secret is read again): a GitSync's spec.decryption,
    # read as its ServiceAccount. None: render.decryption (the CLI's flags, read once).
    decryption: Callable[[], Decryption] | None = field(default=None, compare=False, repr=False)
    # Chart repository credentials asked for once per pass (a GitSync's spec.chartCredentials Secrets, read as
    # its ServiceAccount, so a rotated Secret is used by the next pass); they go to render.chart_access.
    chart_credentials: Callable[[], tuple[RepositoryAccess, ...]] | None = field(
        default=None, compare=False, repr=False
    )


@dataclass
class PassOptions:
    namespace: str = "default"
    prune: bool = False
    allow_empty: bool = False
    dry_run: bool = False
    policy: ConflictPolicy = ConflictPolicy.REPORT
    wait: bool = False
    timeout: float = 300.0
    name: str | None = None  # ApplySet (inventory) name; derived from the source when not given
    inventory_namespace: str | None = None
    adopt_shared: bool = False  # take over objects that are members of another ApplySet
    prune_cascade: bool = False  # prune Namespaces/CRDs even when they hold objects prune does not remove
    cascade_advice: str = cascade.CASCADE_ADVICE  # how a refusal says to override it (a GitSync: its field)
    ignore: tuple[ignore.IgnoreRule, ...] = ()  # --ignore; the repository's .gitops-sync.yaml adds its own
    # `sync`: refuse a commit older than one the inventory records (a descendant of ours); --allow-rollback
    refuse_older: bool = False
