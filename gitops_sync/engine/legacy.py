"""Legacy-inventory migration: an inventory named before source identities existed, taken over once.

A pass finds such an inventory of this very source (`find`), treats its members as its own, moves the
members it did not apply into ours (`adopt_members`) and deletes the old parent (`retire`) after a clean
pass. Anything not provably this source's is left alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gitops_sync import conventions
from gitops_sync.apply import inventory
from gitops_sync.apply.inventory import Inventory
from gitops_sync.engine.naming import sub_path
from gitops_sync.errors import ClusterError
from gitops_sync.log import get_logger
from gitops_sync.plan.changeset import ChangeSet
from gitops_sync.source import Checkout, SourceIdentity, mask_url
from gitops_sync.source.checkout import knows_commit
from gitops_sync.source.identity import label_identities, legacy_inventory_name

if TYPE_CHECKING:
    from gitops_sync.engine.core import Engine

log = get_logger(__name__)


def find(engine: Engine, inv: Inventory, checkout: Checkout, identity: SourceIdentity, label: str) -> Inventory | None:
    """The inventory versions before source identities made for this very source, to take over.

    Named by the old algorithm (repository's last element and --path) and taken only when its
    recorded source is provably this one: a URL or absolute path with our identity, or our very
    (relative) spelling with a recorded commit our repository has. Anything else stays untouched.
    """
    legacy_name = legacy_inventory_name(checkout.repo, sub_path(checkout))
    if legacy_name == inv.name:
        return None
    old = inventory.find_legacy(engine.client, legacy_name, inv.namespace)
    if old is None:
        return None
    recorded = old.recorded.get(conventions.SOURCE, "")
    if identity in label_identities(recorded) or _same_spelling_and_commit(old, checkout, label):
        return old
    log.warning(
        "an inventory of the old naming exists but is not provably this source's; leaving it alone",
        legacy=f"{old.namespace}/{old.name}",
        recorded_source=recorded,
        source=identity.text,
    )
    return None


def _same_spelling_and_commit(old: Inventory, checkout: Checkout, label: str) -> bool:
    """`old` records our very spelling of the source, and a commit our repository has (or, for a plain
    directory, none, as we have none)."""
    recorded = old.recorded.get(conventions.SOURCE, "")
    # Our spelling as recorded now, and as versions before source identities recorded it (`.//apps`).
    sub = sub_path(checkout)
    spellings = {label, mask_url(checkout.repo) + (f"//{sub}" if sub else "")}
    spellings |= {x.rsplit("@", 1)[0] for x in spellings if checkout.ref}
    same_spelling = recorded in spellings or recorded.rsplit("@", 1)[0] in spellings
    recorded_revision = next(
        (old.recorded[k] for k in (conventions.REVISION, conventions.ATTEMPTED_REVISION) if old.recorded.get(k)), ""
    )
    revision = recorded_revision.removesuffix("-dirty")
    return same_spelling and (knows_commit(checkout.repo, revision) or (not revision and not checkout.revision))


def adopt_members(engine: Engine, cs: ChangeSet, inv: Inventory, legacy: Inventory) -> None:
    """Members still labelled with the old inventory's id move into ours (label only), so a later --prune
    still finds them: those that left Git without --prune or kept by `prune: disabled`, and those in Git
    this pass did not apply (an existing create-only object, a skipped conflict). The applied ones moved."""
    try:
        left = list(inventory.list_members(engine.client, engine.discovery, legacy).values())
    except ClusterError as exc:  # the old parent stays (retired only on a clean pass): tried again next pass
        cs.errors.append(f"cannot list the members of the old inventory {legacy.name} to move them: {exc}")
        return
    cs.errors += engine.manager.relabel(left, inv.id)


def retire(engine: Engine, legacy: Inventory, name: str) -> None:
    """Delete the old parent once everything moved; not while it records a kind the server does not
    serve now: those members cannot be listed or moved yet, and the old parent is how they are found."""
    unserved = inventory.unserved_kinds(engine.discovery, legacy)
    where = f"{legacy.namespace}/{legacy.name}"
    if unserved:
        log.warning("old inventory kept: it records kinds not served now", legacy=where, kinds=sorted(unserved))
        return
    inventory.delete_parent(engine.client, legacy)
    log.info("old inventory taken over", legacy=where, inventory=name)
