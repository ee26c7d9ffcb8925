"""What the watch cache keeps of a live object it holds for the planner, and how it is made smaller.

Nothing of the object is dropped: every part of it has a reader whose answer would change without it.
The audit (issue 28), reader by reader, of what a kept body (`WatchCache.get` / `live_of`, and the watch
events handed to the reconciler) is used for:

- `plan/planner.py: is_unchanged`: the intent-hash annotation; `diff.diff_intent`: every leaf Git sets.
- `plan/planner.py: explain`: `diff.diff_objects(result, live)`, the whole object except `status` and the
  server's metadata (`normalize.strip_server_fields`): a field Git does not set (a default) is compared too.
- `plan/ownership.py`, `plan/foreign.py`, `planner.dropped_by_server`: every managedFields entry whole
  (manager, operation, subresource, apiVersion, time, the fieldsV1 trie); `foreign.py` also the values of
  the fields others own that Git does not set.
- `plan/autoscaler.py`, `plan/client_side.py`, `apply/takeover.py`: managedFields entries (the scale
  entry's `f:spec.f:replicas`; kubectl's client-side entry, patched back whole).
- `plan/terminating.py`, `apply/prune.py`, `apply/inventory.py`, `apply/cascade.py`, `plan/bookkeeping.py`:
  metadata (uid, deletionTimestamp, finalizers, labels, annotations, ownerReferences, resourceVersion).
- `health.py` (kstatus): `status` (conditions, counts, observedGeneration) and `metadata.generation`.
- `daemon/reconcile/history.py`, `yields.py`: each field Git sets, its value and owners, at every event.
- `daemon/reconcile/reporter.py: fingerprint`: all but status, resourceVersion, managedFields, generation.
- `plan/masking.py` (reports of Secrets): `data`, `stringData`, the last-applied annotation, to mask them.

So a projection (only the fields Git sets, or without status or managedFields) would change a plan (a
default differing from a dry run's answer is an update), a conflict or foreign-field report (an owner or a
time gone), health (status) or the fingerprint that decides whether a pass runs. What is made smaller is
the representation, never the content:

- short string values are interned (`jsoncodec.intern_strings`): managers, timestamps, enum values;
- managedFields entries and their fieldsV1 tries are shared between objects whose entries are identical:
  all Deployments applied from one template carry the same trie (the fields Git sets), and entries written
  in the same second by the same manager are the same entry. A trie was ~half of a kept body (a Deployment
  of the bench workload: 4.7 of 9.0 kB; a ConfigMap 1.6 of 2.6 kB; tracemalloc).

- every other map and list of the body outside `metadata` (`spec`, `status`, `data`, ...) is shared with an
  identical one seen before (`share_nodes`): a Deployment's strategy, its containers' ports, resources and
  defaults, a Service's ports and ipFamilies are the same in most objects (the live objects of the bench
  workload, numbered apart: 3.1 -> 2.4 kB per kept body, tracemalloc). `metadata` (names, labels,
  annotations) is left as it is: mostly its own, and what bookkeeping reads and copies.

Sharing is exact: two values are shared only when their JSON encodings are byte for byte equal (same
keys in the same order, `1`, `1.0` and `true` kept apart); the table is keyed by a digest of that encoding
and a hit is checked against the encoding, so a digest collision shares nothing. `share_nodes` keys a map or
list by its keys and scalars (with their types; a float by its repr, so `-0.0` is not `0.0`) and the identity
of its children already shared, bottom up: one walk, no encoding; a key names only children its table holds,
so an identity in it is never that of a freed object. Kept bodies are read-only
for every reader (a pass, an event handler and the next pass already see the same dict); `apply/takeover.py`
copies the entries it changes. The tables are bounded and emptied when full: a value already shared stays
shared, later ones start a new table. Called on a cache loop's thread, without the cache's lock; two loops
racing on a table at worst share a little less.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from gitops_sync import jsoncodec
from gitops_sync.resource import Manifest

_TABLE_MAX = 4096  # distinct values per table; ~0.3 MB of keys and slots when full


class _Bounded:
    """A table of shared values, emptied when full: a value already shared stays shared (its holders keep it),
    later ones start a new table."""

    def __init__(self) -> None:
        self._values: dict[Any, Any] = {}

    def _remember(self, key: Any, value: Any) -> Any:
        if len(self._values) >= _TABLE_MAX:
            self._values.clear()
        self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)


class _Table(_Bounded):
    """Digest of a value's JSON encoding → the first value seen with that encoding."""

    def share(self, value: Any) -> Any:
        """An equal value seen before (the same object from then on), else `value` itself, remembered."""
        try:
            encoded = orjson.dumps(value)
        except TypeError:  # not JSON orjson writes (an integer beyond 64 bits): kept as it is
            return value
        digest = hashlib.blake2b(encoded, digest_size=16).digest()
        found = self._values.get(digest)
        if found is not None:
            return found if found is value or orjson.dumps(found) == encoded else value
        return self._remember(digest, value)


_TRIES = _Table()
_ENTRIES = _Table()


class _Nodes(_Bounded):
    """Bottom-up sharing of maps and lists: a node's key is its type, its keys in order, its scalars with their
    types and its children's identities (children shared first); the key's children are held by the value."""

    def share(self, node: Any) -> Any:
        """`node` with its children shared, or an identical node seen before (the same object from then on)."""
        cls = type(node)
        if cls is dict:
            parts: list[Any] = [dict]
            for k, v in node.items():
                if type(v) is dict or type(v) is list:
                    v = node[k] = self.share(v)
                parts.append((k, _part(v)))
        else:
            parts = [list]
            for i, v in enumerate(node):
                if type(v) is dict or type(v) is list:
                    v = node[i] = self.share(v)
                parts.append(_part(v))
        key = tuple(parts)
        try:
            found = self._values.get(key)
        except TypeError:  # a value no key can hold (not JSON): kept as it is
            return node
        return found if found is not None else self._remember(key, node)


def _part(value: Any) -> Any:
    """What a node's key holds of one of its values: a shared child by identity, a scalar with its type."""
    cls = type(value)
    if cls is dict or cls is list:
        return id(value)  # a child already shared: held by the node its key belongs to
    if cls is float:
        return (float, repr(value))
    return (cls, value)


_NODES = _Nodes()
_DESIRED = _Nodes()  # desired manifests share only among themselves, never with a live body


def compact(obj: Manifest) -> None:
    """Make a body the cache keeps smaller, in place, without changing its content (see the module doc)."""
    jsoncodec.intern_strings(obj)
    share_managed_fields(obj)
    share_nodes(obj)


def share_nodes(obj: Manifest, table: _Nodes = _NODES) -> None:
    """Replace each map and list of the body outside `metadata` by an identical one seen before (module doc)."""
    for name, value in obj.items():
        if name != "metadata" and (type(value) is dict or type(value) is list):
            obj[name] = table.share(value)


def compact_desired(manifest: Manifest) -> None:
    """A desired manifest the daemon holds (a target: what it compares and applies) made smaller in place, as a
    kept body is, from a table of desired manifests only. Its readers copy before they change anything but
    `metadata` (bookkeeping writes labels and annotations there; yields and ignore rules remove fields from a
    copy), so `metadata` stays its own. The bench workload's 5,000 targets: 2.2 -> 1.7 kB each (tracemalloc)."""
    jsoncodec.intern_strings(manifest)
    share_nodes(manifest, _DESIRED)


def share_managed_fields(obj: Manifest) -> None:
    """Replace each managedFields entry, and each entry's fieldsV1 trie, by an identical one seen before."""
    meta = obj.get("metadata")
    entries = meta.get("managedFields") if type(meta) is dict else None
    if type(entries) is not list:
        return
    for i, entry in enumerate(entries):
        if type(entry) is not dict:
            continue
        trie = entry.get("fieldsV1")
        if type(trie) is dict and trie:
            entry["fieldsV1"] = _TRIES.share(trie)
        entries[i] = _ENTRIES.share(entry)
