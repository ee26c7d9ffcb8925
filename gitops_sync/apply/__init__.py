"""Make the cluster match the plan: read live state, apply in stages, prune through the ApplySet, wait.

Targets come from `plan`; every request goes through `cluster.Client`; each object's outcome is an `Entry`
handed back to the engine (and to a progress callback), which puts it in the pass's `ChangeSet`.
`ResourceManager` is a facade over one module per verb: `live`, `apply` (with `takeover`), `prune`, `wait`.
"""

from gitops_sync.apply.inventory import Inventory, applyset_id
from gitops_sync.apply.manager import NOT_ATTEMPTED, LiveMap, ResourceManager, WaitResult, not_attempted_entry

__all__ = [
    "NOT_ATTEMPTED",
    "Inventory",
    "LiveMap",
    "ResourceManager",
    "WaitResult",
    "applyset_id",
    "not_attempted_entry",
]
