"""One object's page: each field Git sets with its desired and live value, who owns it, its timeline of
owners, and the fights over it; from the `/status` document (or a `diff -o json` change set).

Pure functions, like `view` (whose `rows` give the object's row): plain dataclasses out, for the
templates `object.html` and `diff.html` (web/__init__.py renders them). Secret values are masked here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitops_sync.conventions import MASK
from gitops_sync.plan.changeset import field_kind, why_text
from gitops_sync.resource import ObjectKey, is_secret
from gitops_sync.web.view import Row, actor_of, group_of, rows, text, who


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
    kind: str  # drift planned applied conflict shared yielded ignored, "in sync"; not compared: NOT_COMPARED
    desired: str
    live: str
    who: str
    actor: str
    timeline: list[Change]
    fight: bool
    why: str = ""  # the reason in one phrase (`live-changed by kubectl (Update/scale) at …`), or why not compared
    where: str = ""  # where Git says it (`apps/web.yaml:7:13`)
    advice: str = ""  # a yielded field: what to do, and when the daemon corrects it again

    @property
    def compared(self) -> bool:
        """Whether desired and live were both read for this field (else the page shows neither as a match)."""
        return self.kind not in NOT_COMPARED


NOT_COMPARED = ("missing", "pruned", "unknown")


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
    note: str = ""  # why the fields were not compared (the object is not in the cluster, left Git, failed)

    @property
    def live_absent(self) -> bool:
        """No live object to show: the page has no live column then (only what the daemon saw last)."""
        return self.row.state == "missing" or (bool(self.row.change) and self.row.action == "create")

    @property
    def explained(self) -> bool:
        """Whether any field has a reason or a place in Git (the `why` and `where in Git` columns)."""
        return any(f.why or f.where for f in self.fields)


def find_object(doc: Mapping[str, Any], group: str, kind: str, ns: str, name: str) -> Mapping[str, Any] | None:
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


def _not_compared(row: Row, detect_only: bool) -> tuple[str, str]:
    """(kind, note) for the fields of an object whose live and desired values were not both read, else ("", "")."""
    if row.state == "missing" or (row.change and row.action == "create"):
        if row.change:
            return "missing", "Not in the cluster: the sync creates it."
        again = "it is not created again (--detect-only); a sync or self-heal creates it" if detect_only else ""
        return "missing", (
            "Not in the cluster (deleted outside Git?)"
            + (f": {again}" if again else "; the next pass creates it")
            + ". What follows is what the daemon saw last, not live values."
        )
    if row.state == "terminating":
        return "unknown", f"Deletion pending: nothing is applied to it, so its fields are not compared. {row.message}"
    if row.action == "prune":
        return "pruned", "Not in Git any more: the prune deletes it (or releases it, if adopted). Git sets no field."
    if row.state == "error":
        return "unknown", f"The last pass could not compare this object: {row.message or 'error'}"
    return "", ""


def _yield_text(y: Mapping[str, Any]) -> tuple[str, str]:
    """(why, advice with how it resumes) of a yielded field."""
    actor = str(y.get("actor") or y.get("manager") or "another manager")
    since = f" since {y['since']}" if y.get("since") else ""
    if y.get("reason") == "autoscaler":
        why = f"yielded to {actor}: it scales the object{since}"
        resume = "Git's value is applied again once the autoscaler is gone or Git's value changes"
    else:
        why = f"yielded to {actor}: it kept taking the field back (a fight){since}"
        resume = (
            "correcting resumes when Git's value changes, or once "
            f"{y.get('manager') or 'the other manager'} has not written it for a whole --fight-window"
        )
    advice = str(y.get("advice") or "")
    return why, (f"{advice}; " if advice else "") + resume


@dataclass(frozen=True)
class _Writing:
    """How this object's values and their writers are written: Secret values masked, our manager named."""

    secret: bool
    ours: str

    def value(self, value: Any) -> str:
        return MASK if self.secret and value is not None else text(value)

    def step(self, r: Mapping[str, Any]) -> Change:
        m, op, sub = _writer(r)
        return Change(
            value=self.value(r.get("value")),
            who=who(m, op, sub),
            actor=actor_of(m, op, sub, ours=self.ours),
            time=str(r.get("time") or ""),
            observed=str(r.get("observed") or ""),
        )


def _writer(r: Mapping[str, Any]) -> tuple[str, str, str]:
    """(manager, operation, subresource) of a record or a field change."""
    return str(r.get("manager") or ""), str(r.get("operation") or ""), str(r.get("subresource") or "")


# A field the object's lists name: (its label on the page, the list it is in, the entry)
_Difference = tuple[str, str, Mapping[str, Any]]


def _differences(obj: Mapping[str, Any], row: Row, dry_run: bool) -> dict[str, _Difference]:
    """path -> how the page labels each field in the object's drift, conflicts, ignored and yielded lists."""
    diffs: dict[str, _Difference] = {}
    for group, lst in (
        ("drift", obj.get("drift")),
        ("conflict", obj.get("conflicts")),
        ("ignored", obj.get("ignored")),
        ("yielded", obj.get("yielded")),
    ):
        for c in lst or []:
            if group == "yielded":
                label = "yielded"
            elif group == "conflict" and row.taken:  # the daemon's force takes it back: drift, as the row says
                label = "drift"
            else:
                label = field_kind(group, str(c.get("reason") or ""), shared=bool(obj.get("shared")), dry_run=dry_run)
            diffs[str(c.get("path"))] = (label, group, c)
    return diffs


def _why(diff: _Difference, row: Row) -> tuple[str, str]:
    """(why, advice) of a field that differs: the reason in one phrase, and for a yield what to do."""
    label, group, c = diff
    if label == "yielded":
        return _yield_text(c)
    if label == "ignored":
        return f"ignore rule ({c.get('mode') or 'ignored'}): left to the cluster, never drift", ""
    why = why_text(str(c.get("reason") or ""), *_writer(c), str(c.get("since") or ""))
    if row.taken and group == "conflict":
        why += "; --on-conflict force takes it back"
    return why, ""


def _differing_field(
    path: str, diff: _Difference, timeline: list[Change], fight: bool, row: Row, writing: _Writing
) -> FieldView:
    label, _, c = diff
    m, op, sub = _writer(c)
    why, advice = _why(diff, row)
    return FieldView(
        path=path,
        kind=label,
        desired=writing.value(c.get("desired")),
        live=writing.value(c.get("live")),
        who=who(m, op, sub),
        actor=str(c.get("actor") or "") or actor_of(m, op, sub, ours=writing.ours),
        timeline=timeline,
        fight=fight,
        why=why,
        where=str(c.get("source") or ""),
        advice=advice,
    )


def _unchanged_field(path: str, timeline: list[Change], fight: bool, absent_kind: str) -> FieldView:
    """A field in none of the lists: `in sync` when the object was compared, else what was seen last."""
    last = timeline[-1] if timeline else Change("(absent)", "(nobody)", "", "", "")
    return FieldView(
        path=path,
        kind=absent_kind or "in sync",
        desired="" if absent_kind else last.value,  # not compared: Git's value is not known here
        live=last.value,
        who=last.who,
        actor=last.actor,
        timeline=timeline,
        fight=fight,
        why=f"last seen {last.observed}" if absent_kind and last.observed else "",
    )


def _fight_view(path: str, f: Mapping[str, Any], writing: _Writing) -> FightView:
    return FightView(
        path=path,
        managers=[str(m) for m in f.get("managers") or []],
        changes=int(f.get("changes") or 0),
        first=str(f.get("first") or ""),
        last=str(f.get("last") or ""),
        steps=[writing.step(v) for v in f.get("values") or []],
    )


_FIELD_ORDER = {"conflict": 0, "shared": 0, "drift": 1, "yielded": 1, "planned": 2, "applied": 2, "ignored": 3}


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
    `history` (fields that changed at least once).

    A field is `in sync` only when the object was compared and the field is in none of its lists (drift,
    conflicts, yielded, ignored); an object not in the cluster, left Git or not planned shows what the daemon
    saw last, never as a match."""
    obj = find_object(doc, group, kind, namespace, name)
    if obj is None:
        return None
    flags = {k: doc[k] for k in ("daemon", "dryRun") if k in doc}
    row = next(r for r in rows({"objects": [obj], "fights": doc.get("fights"), **flags}, source_id))
    daemon = doc.get("daemon") or {}
    writing = _Writing(is_secret(ObjectKey(group, kind, namespace, name)), str(daemon.get("fieldManager") or ""))
    if history is None:
        history = {}
        for h in doc.get("history") or []:
            if _same(h, group, kind, namespace, name):
                history = h.get("fields") or {}
    fought = {str(f.get("field")): f for f in doc.get("fights") or [] if _same(f, group, kind, namespace, name)}
    diffs = _differences(obj, row, bool(doc.get("dryRun", True)))
    absent_kind, note = _not_compared(row, daemon.get("mode") == "detect-only")
    fields: list[FieldView] = []
    for path in sorted(set(history) | set(diffs)):
        timeline = [writing.step(r) for r in history.get(path) or []]
        if path in diffs:
            fields.append(_differing_field(path, diffs[path], timeline, path in fought, row, writing))
        else:
            fields.append(_unchanged_field(path, timeline, path in fought, absent_kind))
    fields.sort(key=lambda f: (not f.fight, _FIELD_ORDER.get(f.kind, 4), -len(f.timeline), f.path))
    shared = obj.get("shared")
    return ObjectView(
        row=row,
        fields=fields,
        fights=[_fight_view(p, f, writing) for p, f in sorted(fought.items())],
        co_owners=[dict(c) for c in obj.get("coOwners") or []],
        shared=dict(shared) if isinstance(shared, Mapping) else None,
        origin=str(obj.get("origin") or ""),
        note=note,
    )
