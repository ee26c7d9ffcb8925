"""Field paths in the API server's own notation, and lookups on plain-dict objects.

The server prints a path as in SSA conflict messages (structured-merge-diff `Path.String()`):
`.spec.replicas`, `.spec.template.spec.containers[name="api"].image`,
`.spec.ports[port=80,protocol="TCP"].targetPort`, `.metadata.finalizers[="a"]`, `.spec.args[0]`.
Keeping that notation end to end means a conflict path from a 409, a path from `managedFields`
and a path from our own diff compare as plain strings, and users see what `kubectl` shows them.

One concept per module, as structured-merge-diff's `fieldpath` package splits them:

| module | holds |
|---|---|
| `element.py` | the path elements (`Field`, `Key`, `Value`, `Index`) and `Path`; each prints itself |
| `goformat.py` | values spelled as Go spells them (key values in paths, quoted names in messages) |
| `notation.py` | reading the printed notation back (`parse`), `format_path`, `go_unquote` |
| `listkeys.py` | how a list merges: key fields, set, or atomic (`list_keys`, `item_key`) |
| `walk.py` | leaves of an object, `get`/`resolve`/`remove` along a path, `MISSING` |
| `fieldsv1.py` | the managedFields FieldsV1 codec (`parse_fields_v1`) |

Consumers (`plan/diff.py`, `plan/normalize.py`, `plan/masking.py`, `plan/ownership.py`, `plan/planner.py`,
`daemon/history.py`) import from this package, never from its modules.
"""

from gitops_sync.plan.fieldpath.element import Field, Index, Key, Path, PathElement, Value, canonical_json
from gitops_sync.plan.fieldpath.fieldsv1 import parse_fields_v1
from gitops_sync.plan.fieldpath.listkeys import ATOMIC_LISTS, MERGE_KEYS, SET, item_key, list_keys
from gitops_sync.plan.fieldpath.notation import format_path, go_unquote, parse
from gitops_sync.plan.fieldpath.walk import (
    MISSING,
    Missing,
    Step,
    get,
    leaf_paths,
    leaves,
    remove,
    resolve,
)

__all__ = [
    "ATOMIC_LISTS",
    "MERGE_KEYS",
    "MISSING",
    "SET",
    "Field",
    "Index",
    "Key",
    "Missing",
    "Path",
    "PathElement",
    "Step",
    "Value",
    "canonical_json",
    "format_path",
    "get",
    "go_unquote",
    "item_key",
    "leaf_paths",
    "leaves",
    "list_keys",
    "parse",
    "parse_fields_v1",
    "remove",
    "resolve",
]
