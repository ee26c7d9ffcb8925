"""What the web page shows, computed from the `/status` document (or a `diff -o json` change set).

Pure functions: a status document in, plain dicts and lists out, for the Jinja2 templates (web/__init__.py)
to render. Nothing here produces markup; the templates autoescape every string. Secret values are masked
again here even though they arrive masked: a page is one more place they must never reach.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from gitops_sync.formatting import truncate
from gitops_sync.plan import actors
from gitops_sync.plan.changeset import change_of, field_kind

# The daemon's states of an object, and `yielded`: in sync but for fields left to another manager (the
# daemon counts those synced; the page says which). `planned`/`applied` only in a change set (`diff -o html`).
STATES = ("synced", "drifted", "planned", "missing", "terminating", "conflict", "yielded", "error")
PLAN_STATES = ("planned", "applied")
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
    """One source the daemon reconciles: the first level of the page.

    `id` is the GitSync's `namespace/name` in a fleet (`gitsync` the same), else the inventory's name."""

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
    gitsync: str = ""
    path: str = ""
    ref: str = ""  # the revision the GitSync asks for (branch, tag, commit; "" = the default branch)
    depends_on: list[str] = field(default_factory=list)
    suspended: bool = False
    objects: int = 0
    cluster: str = ""  # a GitSync's target cluster when not the controller's (spec.kubeConfig)

    @property
    def url(self) -> str:
        return "/sources/" + "/".join(quote(part, safe="") for part in self.id.split("/"))


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
    gs = daemon.get("gitsync") or {}
    spec = daemon.get("spec") or {}
    states: dict[str, int] = dict.fromkeys(STATES, 0)
    objects = doc.get("objects") or []
    dry_run = bool(doc.get("dryRun", True))
    for obj in objects:  # the rule each row's state comes from (`rows`): the counts cannot disagree with them
        st = state_of(obj, dry_run=dry_run)
        states[st] = states.get(st, 0) + 1
    name = str(inv.get("name") or doc.get("source") or "source")
    ref = str(gs.get("name") or "")
    return Source(
        id=ref or name,
        gitsync=ref,
        path=str(spec.get("path") or ""),
        ref=str(spec.get("revision") or ""),
        depends_on=[str(d) for d in spec.get("dependsOn") or []],
        suspended=bool(gs.get("suspended") or spec.get("suspend")),
        objects=len(objects),
        cluster=str(gs.get("cluster") or ""),
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


Visible = Callable[[str, str], bool]  # (namespace, name) of a GitSync -> may this reader see it


def _shown(d: Mapping[str, Any], visible: Visible | None) -> bool:
    """Whether a reader limited to `visible` GitSyncs may see source document `d` (None: no limit). A source
    that names no GitSync is never shown to a limited reader."""
    if visible is None:
        return True
    ns, _, name = str(((d.get("daemon") or {}).get("gitsync") or {}).get("name") or "").partition("/")
    return bool(ns and name) and visible(ns, name)


def sources(doc: Mapping[str, Any], visible: Visible | None = None) -> list[Source]:
    return [source_of(d) for d in source_docs(doc) if _shown(d, visible)]


def find_source(doc: Mapping[str, Any], source_id: str, visible: Visible | None = None) -> Source | None:
    """The source `source_id` (a GitSync's `namespace/name` or an inventory name), if this reader may see it;
    only that one is asked about."""
    for d in source_docs(doc):
        gs = str(((d.get("daemon") or {}).get("gitsync") or {}).get("name") or "")
        inv = str((d.get("inventory") or {}).get("name") or d.get("source") or "source")
        if (gs or inv) == source_id:
            return source_of(d) if _shown(d, visible) else None
    return None


# -- objects -----------------------------------------------------------------------------------------


def _reasons(obj: Mapping[str, Any]) -> list[str]:
    return [str(c.get("reason") or "") for c in obj.get("drift") or []]


def state_of(obj: Mapping[str, Any], *, dry_run: bool = True) -> str:
    """The daemon's state when it gave one (`yielded` when it says synced but left fields to another
    manager); in a change set (`diff -o html`) from the action: what Git changes is `planned` (`applied`
    after a sync), `drifted` only an update whose every field another manager wrote."""
    st = obj.get("state")
    if isinstance(st, str) and st:
        return "yielded" if st == "synced" and obj.get("yielded") else st
    action = str(obj.get("action") or "")
    if action in ("error", "terminating"):
        return action
    if action == "conflict" or obj.get("conflicts"):
        return "conflict"
    change = change_of(action, _reasons(obj), dry_run=dry_run)
    if change == "drift":
        return "drifted"
    return "synced" if action == "unchanged" else ("planned" if dry_run else "applied")


@dataclass
class Row:
    """One object in a source's list.

    A plan's conflict that the daemon counts as drift (its `--on-conflict force` takes the fields back) is
    shown as drift: `taken` of the `drift` fields are another manager's, and the action reads `update
    (force)`. So no row says `conflict` that the summary does not count as one."""

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
    source_id: str
    actors: list[str] = field(default_factory=list)  # who made the differences, in words ("kubectl scale")
    yielded: int = 0
    taken: int = 0
    planned: int = 0  # differences Git made (git-changed, server-changed): not drift
    dry_run: bool = True
    change: str = ""  # a change set's words for the action: `planned change`, `drift` (see changeset.change_of)

    @property
    def title(self) -> str:
        gk = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{gk}/{self.namespace}/{self.name}" if self.namespace else f"{gk}/{self.name}"

    @property
    def url(self) -> str:
        return object_url(self.source_id, self.group, self.kind, self.namespace, self.name)

    @property
    def planned_word(self) -> str:
        return field_kind("drift", "", dry_run=self.dry_run)  # planned | applied

    @property
    def action_text(self) -> str:
        if self.change:
            return self.change
        return "update (force)" if self.taken else self.action


def object_url(source_id: str, group: str, kind: str, namespace: str, name: str) -> str:
    head = "/".join(quote(p, safe="") for p in source_id.split("/"))
    parts = (group or CORE, kind, namespace or "-", name)
    return "/sources/{}/objects/{}/{}/{}/{}".format(head, *(quote(p, safe="") for p in parts))


def _fight_count(doc: Mapping[str, Any]) -> dict[tuple[str, str, str, str], int]:
    out: dict[tuple[str, str, str, str], int] = {}
    for f in doc.get("fights") or []:
        k = (str(f.get("group", "")), str(f.get("kind", "")), str(f.get("namespace", "")), str(f.get("name", "")))
        out[k] = out.get(k, 0) + 1
    return out


def is_change_set(doc: Mapping[str, Any]) -> bool:
    """A `diff`/`sync -o json` document (no daemon): its objects carry actions, not the daemon's states."""
    return "daemon" not in doc


def rows(doc: Mapping[str, Any], source_id: str) -> list[Row]:
    fights = _fight_count(doc)
    dry_run = bool(doc.get("dryRun", True))
    plan = is_change_set(doc)
    out = []
    for obj in doc.get("objects") or []:
        kind, ns, name = str(obj.get("kind", "")), str(obj.get("namespace") or ""), str(obj.get("name", ""))
        api_version = str(obj.get("apiVersion", ""))
        group = group_of(api_version)
        state = state_of(obj, dry_run=dry_run)
        reasons = _reasons(obj)
        drift = sum(1 for r in reasons if field_kind("drift", r) == "drift")
        conflicts = len(obj.get("conflicts") or [])
        taken = conflicts if conflicts and state != "conflict" and not obj.get("shared") else 0
        action = str(obj.get("action", ""))
        out.append(
            Row(
                kind=kind,
                group=group,
                namespace=ns,
                name=name,
                api_version=api_version,
                action=action,
                state=state,
                health=str(obj.get("health") or ""),
                message=str(obj.get("message") or ""),
                drift=drift + taken,
                planned=len(reasons) - drift,
                dry_run=dry_run,
                conflicts=conflicts - taken,
                shared=bool(obj.get("shared")),
                fights=fights.get((group, kind, ns, name), 0),
                source_id=source_id,
                actors=_actors(obj),
                yielded=len(obj.get("yielded") or []),
                taken=taken,
                change=change_of(action, reasons, dry_run=dry_run) if plan else "",
            )
        )
    return out


def _actors(obj: Mapping[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for c in [*(obj.get("drift") or []), *(obj.get("conflicts") or []), *(obj.get("yielded") or [])]:
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
            state=state if state in (*STATES, *PLAN_STATES, "changed") else "",
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
    # what needs a look first: errors, conflicts, drift, missing, going, yielded; then by name
    order = {
        "error": 0,
        "conflict": 1,
        "drifted": 2,
        "missing": 3,
        "terminating": 4,
        "yielded": 5,
        "planned": 5,
        "synced": 6,
    }
    matched.sort(key=lambda r: (order.get(r.state, 7), -r.fights, r.kind, r.namespace, r.name))
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
