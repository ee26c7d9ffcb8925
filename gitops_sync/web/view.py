"""What the web page shows, computed from the `/status` document (or a `diff -o json` change set).

Pure functions: a status document in, plain dicts and lists out, for the Jinja2 templates (web/__init__.py)
to render. Nothing here produces markup; the templates autoescape every string. Secret values are masked
again here even though they arrive masked: a page is one more place they must never reach.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from gitops_sync.conventions import MASK
from gitops_sync.formatting import truncate
from gitops_sync.plan import actors
from gitops_sync.resource import ObjectKey, is_secret

STATES = ("synced", "drifted", "missing", "terminating", "conflict", "error")
PAGE_SIZE = 200  # objects per page of a source's list: a 10,000-object source stays a light page
VALUE_LIMIT = 4000  # characters of one value on a page (an embedded file is cut, with a note)
CORE = "core"  # the URL segment for the core API group ("")


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def text(value: Any, limit: int | None = VALUE_LIMIT) -> str:
    """A value as text: strings as they are, everything else as JSON; None is `(absent)`."""
    if value is None:
        return "(absent)"
    return truncate(value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True), limit)


who = actors.record  # `kubectl (Update, subresource scale)`: the managedFields record, without the words


def actor_of(manager: str, operation: str = "", subresource: str = "", *, ours: str = "") -> str:
    """The manager in words (`kubectl scale`), or "" when that says nothing more than the manager."""
    words = actors.describe(manager, operation, subresource, ours=ours)
    return "" if words == manager else words


# -- sources -----------------------------------------------------------------------------------------


@dataclass
class Source:
    """One source the daemon reconciles: the first level of the page."""

    id: str
    repo: str
    revision: str
    applied: str
    inventory: str
    inventory_namespace: str
    mode: str
    ready: bool
    ready_reason: str
    summary: dict[str, int]
    states: dict[str, int]
    errors: list[str]
    fights: int
    last_checked: str
    doc: Mapping[str, Any] = field(repr=False)

    @property
    def url(self) -> str:
        return "/sources/" + quote(self.id, safe="")


def source_docs(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every source in a status document: a daemon with many sources lists them under `sources`, each
    shaped like today's single-source document; today's document is the one source."""
    many = doc.get("sources")
    if isinstance(many, list):
        return [d for d in many if isinstance(d, Mapping)]
    return [doc]


def source_of(doc: Mapping[str, Any]) -> Source:
    daemon = doc.get("daemon") or {}
    src = daemon.get("source") or {}
    inv = doc.get("inventory") or {}
    states: dict[str, int] = dict.fromkeys(STATES, 0)
    for obj in doc.get("objects") or []:
        st = state_of(obj)
        states[st] = states.get(st, 0) + 1
    name = str(inv.get("name") or doc.get("source") or "source")
    return Source(
        id=name,
        repo=str(src.get("repo") or inv.get("sourceIdentity") or doc.get("source") or ""),
        revision=str(src.get("revision") or doc.get("revision") or ""),
        applied=str(daemon.get("appliedRevision") or ""),
        inventory=name,
        inventory_namespace=str(inv.get("namespace") or ""),
        mode=str(daemon.get("mode") or ("dry run" if doc.get("dryRun") else "sync")),
        ready=bool(daemon.get("ready", True)),
        ready_reason=str(daemon.get("readyReason") or ""),
        summary={str(k): int(v) for k, v in (doc.get("summary") or {}).items()},
        states=states,
        errors=[str(e) for e in doc.get("errors") or []],
        fights=len(doc.get("fights") or []),
        last_checked=str(src.get("lastChecked") or ""),
        doc=doc,
    )


def sources(doc: Mapping[str, Any]) -> list[Source]:
    return [source_of(d) for d in source_docs(doc)]


def find_source(doc: Mapping[str, Any], source_id: str) -> Source | None:
    return next((s for s in sources(doc) if s.id == source_id), None)


# -- objects -----------------------------------------------------------------------------------------


def state_of(obj: Mapping[str, Any]) -> str:
    """The daemon's state when it gave one, else the same rule from the action (a `diff` change set)."""
    st = obj.get("state")
    if isinstance(st, str) and st:
        return st
    action = obj.get("action")
    if action in ("error", "terminating"):
        return str(action)
    if action == "conflict" or obj.get("conflicts"):
        return "conflict"
    if action == "create":
        return "missing"
    return "drifted" if action in ("update", "prune") else "synced"


@dataclass
class Row:
    """One object in a source's list."""

    kind: str
    group: str
    namespace: str
    name: str
    api_version: str
    action: str
    state: str
    health: str
    message: str
    drift: int
    conflicts: int
    shared: bool
    fights: int
    url: str
    actors: list[str] = field(default_factory=list)  # who made the differences, in words ("kubectl scale")

    @property
    def title(self) -> str:
        gk = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{gk}/{self.namespace}/{self.name}" if self.namespace else f"{gk}/{self.name}"


def object_url(source_id: str, group: str, kind: str, namespace: str, name: str) -> str:
    parts = (source_id, group or CORE, kind, namespace or "-", name)
    return "/sources/{}/objects/{}/{}/{}/{}".format(*(quote(p, safe="") for p in parts))


def _fight_count(doc: Mapping[str, Any]) -> dict[tuple[str, str, str, str], int]:
    out: dict[tuple[str, str, str, str], int] = {}
    for f in doc.get("fights") or []:
        k = (str(f.get("group", "")), str(f.get("kind", "")), str(f.get("namespace", "")), str(f.get("name", "")))
        out[k] = out.get(k, 0) + 1
    return out


def rows(doc: Mapping[str, Any], source_id: str) -> list[Row]:
    fights = _fight_count(doc)
    out = []
    for obj in doc.get("objects") or []:
        kind, ns, name = str(obj.get("kind", "")), str(obj.get("namespace") or ""), str(obj.get("name", ""))
        api_version = str(obj.get("apiVersion", ""))
        group = group_of(api_version)
        out.append(
            Row(
                kind=kind,
                group=group,
                namespace=ns,
                name=name,
                api_version=api_version,
                action=str(obj.get("action", "")),
                state=state_of(obj),
                health=str(obj.get("health") or ""),
                message=str(obj.get("message") or ""),
                drift=len(obj.get("drift") or []),
                conflicts=len(obj.get("conflicts") or []),
                shared=bool(obj.get("shared")),
                fights=fights.get((group, kind, ns, name), 0),
                url=object_url(source_id, group, kind, ns, name),
                actors=_actors(obj),
            )
        )
    return out


def _actors(obj: Mapping[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for c in [*(obj.get("drift") or []), *(obj.get("conflicts") or [])]:
        words = str(c.get("actor") or "") or str(c.get("manager") or "")
        if words:
            seen.setdefault(words, None)
    return list(seen)


@dataclass(frozen=True)
class Filter:
    """The list's filter, from query parameters (so it works without JavaScript)."""

    q: str = ""
    state: str = ""
    kind: str = ""
    page: int = 1

    @classmethod
    def parse(cls, query: Mapping[str, list[str]]) -> Filter:
        def one(name: str) -> str:
            return (query.get(name) or [""])[0].strip()[:200]

        state = one("state")
        page = one("page")
        return cls(
            q=one("q"),
            state=state if state in (*STATES, "changed") else "",
            kind=one("kind"),
            page=max(1, int(page)) if page.isdigit() and len(page) < 7 else 1,
        )

    def match(self, row: Row) -> bool:
        if self.state == "changed":
            if row.state == "synced" and not row.fights:
                return False
        elif self.state and row.state != self.state:
            return False
        if self.kind and row.kind.lower() != self.kind.lower():
            return False
        if self.q:
            hay = f"{row.title} {row.message} {row.health} {' '.join(row.actors)}".lower()
            return all(word in hay for word in self.q.lower().split())
        return True

    def query(self, **change: Any) -> str:
        """This filter as a query string, with some parameters changed (for links: states, pages)."""
        values = {"q": self.q, "state": self.state, "kind": self.kind, "page": self.page, **change}
        kept = {k: v for k, v in values.items() if v and not (k == "page" and v == 1)}
        return ("?" + urlencode(kept)) if kept else "?"


@dataclass
class Listing:
    rows: list[Row]
    total: int
    matched: int
    page: int
    pages: int
    kinds: list[str]


def listing(doc: Mapping[str, Any], source_id: str, flt: Filter) -> Listing:
    every = rows(doc, source_id)
    matched = [r for r in every if flt.match(r)]
    # what needs a look first: errors, conflicts, drift, missing, going; then by name
    order = {"error": 0, "conflict": 1, "drifted": 2, "missing": 3, "terminating": 4, "synced": 5}
    matched.sort(key=lambda r: (order.get(r.state, 5), -r.fights, r.kind, r.namespace, r.name))
    pages = max(1, -(-len(matched) // PAGE_SIZE))
    page = min(flt.page, pages)
    start = (page - 1) * PAGE_SIZE
    return Listing(
        rows=matched[start : start + PAGE_SIZE],
        total=len(every),
        matched=len(matched),
        page=page,
        pages=pages,
        kinds=sorted({r.kind for r in every}),
    )


# -- one object --------------------------------------------------------------------------------------


@dataclass
class Change:
    """One value a field had, and who set it (a step of the ownership timeline)."""

    value: str
    who: str
    actor: str
    time: str
    observed: str


@dataclass
class FieldView:
    path: str
    kind: str  # drift | conflict | shared | in sync
    desired: str
    live: str
    who: str
    actor: str
    timeline: list[Change]
    fight: bool


@dataclass
class FightView:
    path: str
    managers: list[str]
    changes: int
    first: str
    last: str
    steps: list[Change]

    @property
    def managers_text(self) -> str:
        """`helm, kubectl and gitops-sync`."""
        ms = self.managers
        return ms[0] if len(ms) == 1 else ", ".join(ms[:-1]) + " and " + ms[-1] if ms else "(nobody)"


@dataclass
class ObjectView:
    row: Row
    fields: list[FieldView]
    fights: list[FightView]
    co_owners: list[dict[str, Any]]
    shared: dict[str, Any] | None
    origin: str


def _find_object(doc: Mapping[str, Any], group: str, kind: str, ns: str, name: str) -> Mapping[str, Any] | None:
    for obj in doc.get("objects") or []:
        if (
            str(obj.get("kind")) == kind
            and str(obj.get("namespace") or "") == ns
            and str(obj.get("name")) == name
            and group_of(str(obj.get("apiVersion", ""))) == group
        ):
            return obj  # type: ignore[no-any-return]
    return None


def _same(h: Mapping[str, Any], group: str, kind: str, ns: str, name: str) -> bool:
    return (str(h.get("group", "")), str(h.get("kind", "")), str(h.get("namespace") or ""), str(h.get("name"))) == (
        group,
        kind,
        ns,
        name,
    )


def object_view(
    doc: Mapping[str, Any],
    source_id: str,
    group: str,
    kind: str,
    namespace: str,
    name: str,
    history: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> ObjectView | None:
    """`history`: path -> records (oldest first) of every field Git sets; default: the document's own
    `history` (fields that changed at least once)."""
    obj = _find_object(doc, group, kind, namespace, name)
    if obj is None:
        return None
    row = next(r for r in rows({"objects": [obj], "fights": doc.get("fights")}, source_id))
    secret = is_secret(ObjectKey(group, kind, namespace, name))
    ours = str((doc.get("daemon") or {}).get("fieldManager") or "")

    def shown(value: Any) -> str:
        return MASK if secret and value is not None else text(value)

    if history is None:
        history = {}
        for h in doc.get("history") or []:
            if _same(h, group, kind, namespace, name):
                history = h.get("fields") or {}
    fought = {str(f.get("field")): f for f in doc.get("fights") or [] if _same(f, group, kind, namespace, name)}

    def step(r: Mapping[str, Any]) -> Change:
        m, op, sub = str(r.get("manager") or ""), str(r.get("operation") or ""), str(r.get("subresource") or "")
        return Change(
            value=shown(r.get("value")),
            who=who(m, op, sub),
            actor=actor_of(m, op, sub, ours=ours),
            time=str(r.get("time") or ""),
            observed=str(r.get("observed") or ""),
        )

    diffs: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for kind_, lst in (("drift", obj.get("drift")), ("conflict", obj.get("conflicts"))):
        for c in lst or []:
            label = "shared" if kind_ == "conflict" and obj.get("shared") else kind_
            diffs[str(c.get("path"))] = (label, c)
    fields: list[FieldView] = []
    for path in sorted(set(history) | set(diffs)):
        records = list(history.get(path) or [])
        timeline = [step(r) for r in records]
        if path in diffs:
            label, c = diffs[path]
            m, op, sub = str(c.get("manager") or ""), str(c.get("operation") or ""), str(c.get("subresource") or "")
            fields.append(
                FieldView(
                    path=path,
                    kind=label,
                    desired=shown(c.get("desired")),
                    live=shown(c.get("live")),
                    who=who(m, op, sub),
                    actor=str(c.get("actor") or "") or actor_of(m, op, sub, ours=ours),
                    timeline=timeline,
                    fight=path in fought,
                )
            )
        else:
            last = timeline[-1] if timeline else Change("(absent)", "(nobody)", "", "", "")
            fields.append(
                FieldView(
                    path=path,
                    kind="in sync",
                    desired=last.value,
                    live=last.value,
                    who=last.who,
                    actor=last.actor,
                    timeline=timeline,
                    fight=path in fought,
                )
            )
    order = {"conflict": 0, "shared": 0, "drift": 1, "in sync": 2}
    fields.sort(key=lambda f: (not f.fight, order.get(f.kind, 3), -len(f.timeline), f.path))
    fights = [
        FightView(
            path=p,
            managers=[str(m) for m in f.get("managers") or []],
            changes=int(f.get("changes") or 0),
            first=str(f.get("first") or ""),
            last=str(f.get("last") or ""),
            steps=[step(v) for v in f.get("values") or []],
        )
        for p, f in sorted(fought.items())
    ]
    shared = obj.get("shared")
    return ObjectView(
        row=row,
        fields=fields,
        fights=fights,
        co_owners=[dict(c) for c in obj.get("coOwners") or []],
        shared=dict(shared) if isinstance(shared, Mapping) else None,
        origin=str(obj.get("origin") or ""),
    )
