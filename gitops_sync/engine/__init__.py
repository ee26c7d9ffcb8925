"""One reconciliation pass: source -> render -> plan -> apply -> prune -> wait -> change set.

`diff`, `sync` and every daemon pass call `Engine.run`; they differ only in options and in where live
state comes from (fresh reads, or the daemon's watch cache). The change set it returns goes to the CLI's
report or the daemon's reconciler.

- `options`: what a pass is asked (`SourceOptions`, `PassOptions`).
- `loading`: fetch and render, before any cluster access (`load`).
- `naming`: a source's label, identity and inventory name.
- `core`: the `Engine`; `state`: one pass's `PassState`; `phases`: the ordered phases `run` goes through.
- `prune`, `legacy` (taking over an inventory of the old naming), `positions` (where Git writes a field).
"""

from gitops_sync.engine.core import Engine
from gitops_sync.engine.loading import disk_render_cache, fetch_source, load
from gitops_sync.engine.naming import default_inventory_name, inventory_of, source_identity, source_label
from gitops_sync.engine.options import PassOptions, SourceOptions

__all__ = [
    "Engine",
    "PassOptions",
    "SourceOptions",
    "default_inventory_name",
    "disk_render_cache",
    "fetch_source",
    "inventory_of",
    "load",
    "source_identity",
    "source_label",
]
