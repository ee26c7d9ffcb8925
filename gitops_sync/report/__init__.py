"""Change sets for people (table), machines (json) and pull requests (markdown).

Values reach here already masked for Secrets; long values are shortened for the table only.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gitops_sync.plan.changeset import Action, ChangeSet, Entry, FieldChange

FORMATS = ("table", "json", "markdown")

_STYLE = {
    Action.CREATE: "green",
    Action.UPDATE: "yellow",
    Action.UNCHANGED: "dim",
    Action.PRUNE: "magenta",
    Action.CONFLICT: "bold red",
    Action.ERROR: "bold red",
}


def write(cs: ChangeSet, fmt: str, out: TextIO, *, color: bool | None = None, verbose: bool = False) -> None:
    if fmt == "json":
        json.dump(cs.to_dict(), out, indent=2, default=str)
        out.write("\n")
    elif fmt == "markdown":
        out.write(markdown(cs, verbose=verbose))
    else:
        table(cs, Console(file=out, force_terminal=color, no_color=color is False, width=160), verbose=verbose)


def short(value: Any, limit: int = 60) -> str:
    if value is None:
        return "(absent)"
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def who(c: FieldChange) -> str:
    """`kubectl (Update, subresource scale): kubectl scale` — the record, then the actor in words."""
    if not c.manager:
        return "(nobody)"
    extra = ", ".join(x for x in (c.operation, f"subresource {c.subresource}" if c.subresource else "") if x)
    text = f"{c.manager} ({extra})" if extra else c.manager
    return f"{text}: {c.actor}" if c.actor and c.actor != c.manager else text


def _headline(cs: ChangeSet) -> str:
    s = cs.summary()
    parts = [f"{s[a.value]} {a.value}" for a in Action if s[a.value]]
    rev = cs.revision[:12] if cs.revision else "(no revision)"
    mode = " (dry run)" if cs.dry_run else ""
    return f"{cs.source} at {rev}{mode}: " + (", ".join(parts) or "nothing to do")


def _inventory(cs: ChangeSet) -> str:
    """Which inventory (ApplySet parent) this source owns: where to look, what --name to pass."""
    if not cs.inventory:
        return ""
    return f"inventory {cs.inventory_namespace}/{cs.inventory} (source {cs.source_identity or cs.source})"


def table(cs: ChangeSet, console: Console, *, verbose: bool = False) -> None:
    console.print(Text(_headline(cs), style="bold"))
    if cs.inventory:
        console.print(Text(_inventory(cs), style="dim"))
    shown = [e for e in cs.sorted_entries() if verbose or e.action is not Action.UNCHANGED]
    if shown:
        t = Table(show_header=True, header_style="bold", expand=False)
        for col in ("action", "object", "message"):
            t.add_column(col)
        for e in shown:
            t.add_row(Text(e.action.value, style=_STYLE[e.action]), str(e.key), e.message)
        console.print(t)
    fields = [(e, c, kind) for e in shown for kind, cs_ in (("conflict", e.conflicts), ("drift", e.drift)) for c in cs_]
    if fields:
        ft = Table(title="fields", show_header=True, header_style="bold")
        for col in ("object", "", "path", "desired (Git)", "live", "owned live by"):
            ft.add_column(col)
        for e, c, kind in fields:
            ft.add_row(
                str(e.key),
                Text(kind, style="bold red" if kind == "conflict" else "yellow"),
                c.path,
                short(c.desired),
                short(c.live),
                who(c),
            )
        console.print(ft)
    co = [(e, o) for e in shown for o in e.co_owners]
    if co:
        ot = Table(title="other managers owning fields Git sets", show_header=True, header_style="bold")
        for col in ("object", "manager", "operation", "fields"):
            ot.add_column(col)
        for e, o in co:
            op = o.operation + (f" ({o.subresource})" if o.subresource else "")
            ot.add_row(str(e.key), o.manager, op, ", ".join(o.fields[:6]) + (" …" if len(o.fields) > 6 else ""))
        console.print(ot)
    for err in cs.errors:
        console.print(Text(f"error: {err}", style="bold red"))


def markdown(cs: ChangeSet, *, verbose: bool = False) -> str:
    lines = [f"### gitops-sync: {_md(_headline(cs))}", ""]
    if cs.inventory:
        lines += [_md(_inventory(cs)), ""]
    shown = [e for e in cs.sorted_entries() if verbose or e.action is not Action.UNCHANGED]
    if shown:
        lines += ["| action | object | message |", "|---|---|---|"]
        lines += [f"| {e.action.value} | `{e.key}` | {_md(e.message)} |" for e in shown]
        lines.append("")
    rows = [(e, kind, c) for e in shown for kind, lst in (("conflict", e.conflicts), ("drift", e.drift)) for c in lst]
    if rows:
        lines += ["| object | | path | desired (Git) | live | owned live by |", "|---|---|---|---|---|---|"]
        lines += [
            f"| `{e.key}` | {kind} | `{c.path}` | `{_md(short(c.desired))}` | `{_md(short(c.live))}` | {_md(who(c))} |"
            for e, kind, c in rows
        ]
        lines.append("")
    co = [(e, o) for e in shown for o in e.co_owners]
    if co:
        lines += ["<details><summary>other managers owning fields Git sets</summary>", ""]
        lines += [
            f"- `{e.key}`: **{o.manager}** ({o.operation}) on {', '.join(f'`{f}`' for f in o.fields)}" for e, o in co
        ]
        lines += ["", "</details>", ""]
    lines += [f"> **error:** {_md(err)}" for err in cs.errors]
    return "\n".join(lines).rstrip() + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def exit_code_diff(cs: ChangeSet) -> int:
    """`kubectl diff`/`flux diff`: 0 in sync, 1 differences or conflicts, 2 error."""
    if cs.has_errors:
        return 2
    return 1 if cs.has_changes or cs.has_conflicts else 0


def exit_code_sync(cs: ChangeSet) -> int:
    """0 applied cleanly, 1 conflicts left unresolved, 2 error."""
    if cs.has_errors:
        return 2
    return 1 if cs.has_conflicts else 0


__all__ = ["FORMATS", "Entry", "exit_code_diff", "exit_code_sync", "markdown", "table", "write"]
