"""Change sets for people (table), machines (json) and pull requests (markdown).

Values reach here already masked for Secrets. Every cell is plain text in every format: the table
never reads a value as rich markup (`[/]`, `containers[name="api"]`), Markdown escapes what would
break a table row or inject HTML. On a terminal the table follows its width and long values are
shortened; anywhere else (a pipe, a CI log) nothing is cut.
"""

from __future__ import annotations

import errno
import functools
import json
import re
from typing import TYPE_CHECKING, Any, Final, TextIO

from gitops_sync import jsoncodec
from gitops_sync.formatting import truncate
from gitops_sync.plan import actors
from gitops_sync.plan.changeset import Action, ChangeSet, Entry, FieldChange, Foreign, Ignored, field_kind
from gitops_sync.source import short_revision

if TYPE_CHECKING:  # rich is imported by the table only: `-o json` and markdown never pay for it
    from rich.console import Console
    from rich.table import Table


_STYLE = {
    Action.CREATE: "green",
    Action.UPDATE: "yellow",
    Action.UNCHANGED: "dim",
    Action.PRUNE: "magenta",
    Action.TERMINATING: "bold magenta",
    Action.CONFLICT: "bold red",
    Action.ERROR: "bold red",
}
# Off a terminal the table is as wide as its widest row: rich needs a width, this one is never reached.
_UNBOUNDED: Final = 1_000_000
_TERMINAL_VALUE_LIMIT: Final = 200  # a whole embedded file is noise on a screen; an image is not


def write(
    cs: ChangeSet,
    fmt: str,
    out: TextIO,
    *,
    color: bool | None = None,
    verbose: bool = False,
    terminal: bool | None = None,
) -> None:
    """`terminal` (default: whether `out` is one) decides width and shortening of the table."""
    if fmt == "json":
        out.write(_json_text(cs.to_dict(), out) + "\n")  # whole or nothing
    elif fmt == "markdown":
        out.write(markdown(cs, verbose=verbose))
    else:
        on_terminal = _isatty(out) if terminal is None else terminal
        console = _console_class()(
            file=out,
            force_terminal=color,
            no_color=color is False,
            width=None if on_terminal else _UNBOUNDED,
            highlight=False,
            emoji=False,
            markup=False,
        )
        table(cs, console, verbose=verbose, limit=_TERMINAL_VALUE_LIMIT if on_terminal else None)


def write_clusters(
    groups: list[tuple[dict[str, Any], ChangeSet]], fmt: str, out: TextIO, *, exit_code: int, **kwargs: Any
) -> None:
    """The report of one pass per cluster (`sync --context a --context b`), grouped by cluster: each group's
    head (`context`, `server`, `clusterId`, `exitCode`) then its change set; json: one document
    `{"exitCode": worst, "clusters": [{<head>, "report": <change set>}]}`."""
    if fmt == "json":
        doc = {"exitCode": exit_code, "clusters": [{**head, "report": cs.to_dict()} for head, cs in groups]}
        out.write(_json_text(doc, out) + "\n")
        return
    for n, (head, cs) in enumerate(groups):
        title = _cluster_title(head)
        if fmt == "markdown":
            out.write(f"{'' if n == 0 else chr(10)}## Cluster {_md(title)}\n\n")
        else:
            out.write(f"{'' if n == 0 else chr(10)}== cluster {title} ==\n")
        out.flush()
        write(cs, fmt, out, **kwargs)
    if fmt != "markdown":
        worst = ", ".join(f"{h['context'] or '(current)'} {h['exitCode']}" for h, _ in groups)
        out.write(f"\nexit {exit_code} (the worst of: {worst})\n")


def _cluster_title(head: dict[str, Any]) -> str:
    """`prod at https://10.0.0.1:6443 (kube-system uid 4f1c…): exit 0`."""
    where = f" at {head['server']}" if head.get("server") else " (not reached)"
    uid = f" (kube-system uid {head['clusterId']})" if head.get("clusterId") else ""
    return f"{head['context'] or '(current context)'}{where}{uid}: exit {head['exitCode']}"


@functools.cache
def _console_class() -> type[Console]:
    """rich's Console, except for a reader that closed the pipe: rich would exit 1 on its own (SystemExit
    from `on_broken_pipe`); the BrokenPipeError goes to the caller, as it does for json and markdown, and the
    CLI ends with the command's own exit code."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True  # nothing more to write to a reader that is gone
            raise BrokenPipeError(errno.EPIPE, "the reader of the report closed the pipe")

    return _Console


def _json_text(doc: Any, out: TextIO) -> str:
    """orjson (12x faster indented) writes non-ASCII as UTF-8; a stream in another encoding gets \\u escapes."""
    encoding = (getattr(out, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "")
    if encoding != "utf8":
        return json.dumps(doc, indent=2, default=str)
    return jsoncodec.dumps(doc, indent=True, default=str).decode()


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def short(value: Any, limit: int | None = _TERMINAL_VALUE_LIMIT) -> str:
    """A value as one line of text; cut to `limit` characters (None: never)."""
    if value is None:
        return "(absent)"
    return truncate(value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True), limit)


def who(c: FieldChange) -> str:
    """`kubectl (Update, subresource scale): kubectl scale` — the record, then the actor in words."""
    if not c.manager:
        return "(nobody)"
    text = actors.record(c.manager, c.operation, c.subresource)
    return f"{text}: {c.actor}" if c.actor and c.actor != c.manager else text


def why(c: FieldChange) -> str:
    """The reason a field differs (`live-changed by kubectl (Update/scale) at …`), or the ignore rule's mode."""
    if isinstance(c, Ignored):
        return f"ignored: {c.mode}"
    return c.why()


def _headline(cs: ChangeSet) -> str:
    s = cs.summary()
    parts = [f"{s[a.value]} {a.value}" for a in Action if s[a.value]]
    rev = short_revision(cs.revision) if cs.revision else "(no revision)"
    rev += f" (signed by {cs.signer})" if cs.signer else ""
    mode = " (dry run)" if cs.dry_run else ""
    return f"{cs.source} at {rev}{mode}: " + (", ".join(parts) or "nothing to do")


def _inventory(cs: ChangeSet) -> str:
    """Which inventory (ApplySet parent) this source owns: where to look, what --name to pass."""
    if not cs.inventory:
        return ""
    return f"inventory {cs.inventory_namespace}/{cs.inventory} (source {cs.source_identity or cs.source})"


def chart_lines(charts: list[dict[str, str]]) -> list[str]:
    """`chart hello 1.2.0 from https://… (sha256:…)`: each chart pulled from a repository, digest in full."""
    return [f"chart {c['chart']} {c['version']} from {c['repository']} ({c['digest']})" for c in charts]


def hook_lines(hooks: list[dict[str, str]]) -> list[str]:
    """`hook pre-upgrade Job/ns/migrate (weight 0): Job completed`: each Helm hook the pass ran, in order."""
    return [f"hook {h['event']} {h['object']} (weight {h['weight']}): {h['result']}" for h in hooks]


def table(cs: ChangeSet, console: Console, *, verbose: bool = False, limit: int | None = None) -> None:
    """Every cell is a `Text`, never markup; columns fold rather than cut what does not fit."""
    from rich.text import Text

    console.print(Text(_headline(cs), style="bold"))
    if cs.inventory:
        console.print(Text(_inventory(cs), style="dim"))
    for line in chart_lines(cs.charts):
        console.print(Text(line, style="dim"))
    for line in hook_lines(cs.hooks):
        console.print(Text(line, style="dim"))
    shown = [e for e in cs.sorted_entries() if verbose or e.action is not Action.UNCHANGED]
    if shown:
        t = _table(None, "action", "object", "message")
        for e in shown:
            t.add_row(Text(e.action.value, style=_STYLE[e.action]), Text(str(e.key)), Text(e.message))
        console.print(t)
    fields = [(e, c, _kind(cs, e, g, c)) for e in shown for g, lst in _field_groups(e, verbose) for c in lst]
    if fields:
        explained = any(why(c) or c.source for _e, c, _k in fields)  # columns only when something fills them
        extra = ("why", "where in Git") if explained else ()
        ft = _table("fields", "object", "", "path", "desired (Git)", "live", "owned live by", *extra)
        for e, c, kind in fields:
            cells = [str(e.key), kind, c.path, short(c.desired, limit), short(c.live, limit), who(c)]
            cells += [why(c), c.source] if explained else []
            ft.add_row(
                *(Text(x, style=_KIND_STYLE.get(kind, "bold red")) if i == 1 else Text(x) for i, x in enumerate(cells))
            )
        console.print(ft)
    co = [(e, o) for e in shown for o in e.co_owners]
    if co:
        ot = _table("other managers owning fields Git sets", "object", "manager", "operation", "fields")
        for e, o in co:
            op = o.operation + (f" ({o.subresource})" if o.subresource else "")
            many = limit is not None and len(o.fields) > 6
            fields_text = ", ".join(o.fields[:6] if many else o.fields) + (" …" if many else "")
            ot.add_row(Text(str(e.key)), Text(o.manager), Text(op), Text(fields_text))
        console.print(ot)
    foreign = [(e, f) for e in shown for f in e.foreign] if verbose else []
    if foreign:
        ft = _table("added by other managers, not in Git (informational)", "object", "path", "value", "by", "time")
        for e, f in foreign:
            ft.add_row(Text(str(e.key)), Text(f.path), Text(short(f.value, limit)), Text(_by(f)), Text(f.time))
        console.print(ft)
    for err in cs.report_errors():
        console.print(Text(f"error: {err}", style="bold red"))


def _table(title: str | None, *columns: str) -> Table:
    from rich.table import Table

    t = Table(title=title, show_header=True, header_style="bold", expand=False)
    for col in columns:
        t.add_column(col, overflow="fold")
    return t


def markdown(cs: ChangeSet, *, verbose: bool = False) -> str:
    """GitHub-flavoured Markdown; values in code spans, everything from the cluster or Git escaped."""
    lines = [f"### gitops-sync: {_md(_headline(cs))}", ""]
    if cs.inventory:
        lines += [_md(_inventory(cs)), ""]
    if cs.charts or cs.hooks:
        lines += [f"- {_md(line)}" for line in chart_lines(cs.charts) + hook_lines(cs.hooks)] + [""]
    shown = [e for e in cs.sorted_entries() if verbose or e.action is not Action.UNCHANGED]
    if shown:  # what Git changes is `planned`; `drift` only what the cluster changed (a pull request's reader)
        lines += ["| change | object | message |", "|---|---|---|"]
        lines += [f"| {e.change(dry_run=cs.dry_run)} | {_code(str(e.key))} | {_md(e.message)} |" for e in shown]
        lines.append("")
    rows = [(e, _kind(cs, e, g, c), c) for e in shown for g, lst in _field_groups(e, verbose) for c in lst]
    if rows:
        explained = any(why(c) or c.source for _e, _k, c in rows)
        lines += [
            "| object | | path | desired (Git) | live | owned live by |"
            + (" why | where in Git |" if explained else ""),
            "|---|---|---|---|---|---|" + ("---|---|" if explained else ""),
        ]
        lines += [
            f"| {_code(str(e.key))} | {kind} | {_code(c.path)} | {_code(short(c.desired))} | {_code(short(c.live))} "
            f"| {_md(who(c))} |" + (f" {_md(why(c))} | {_code(c.source) if c.source else ''} |" if explained else "")
            for e, kind, c in rows
        ]
        lines.append("")
    co = [(e, o) for e in shown for o in e.co_owners]
    if co:
        lines += ["<details><summary>other managers owning fields Git sets</summary>", ""]
        lines += [
            f"- {_code(str(e.key))}: **{_md(o.manager)}** ({_md(o.operation)}) on "
            + ", ".join(_code(f) for f in o.fields)
            for e, o in co
        ]
        lines += ["", "</details>", ""]
    foreign = [(e, f) for e in cs.sorted_entries() for f in e.foreign]
    if foreign:
        lines += [f"<details><summary>{len(foreign)} field(s) added by other managers, not in Git</summary>", ""]
        lines += [
            f"- {_code(str(e.key))}: {_code(f.path)} = {_code(short(f.value))} by **{_md(_by(f))}** at {_md(f.time)}"
            for e, f in foreign
        ]
        lines += ["", "</details>", ""]
    lines += [f"> **error:** {_md(err)}" for err in cs.report_errors()]
    return "\n".join(lines).rstrip() + "\n"


_KIND_STYLE: Final = {"drift": "yellow", "planned": "cyan", "applied": "green", "ignored": "dim"}


def _by(f: Foreign) -> str:
    """`kubectl-label (Update)`, `kube-controller-manager (Update, scale)`."""
    return f"{f.manager} ({', '.join(p for p in (f.operation, f.subresource) if p)})"


def _field_groups(e: Entry, verbose: bool) -> list[tuple[str, list[FieldChange]]]:
    """The field rows of an entry by kind; fields an ignore rule left to the cluster only when verbose."""
    groups: list[tuple[str, list[FieldChange]]] = [("conflict", e.conflicts), ("drift", e.drift)]
    if verbose:
        groups.append(("ignored", list(e.ignored)))
    return groups


def _kind(cs: ChangeSet, e: Entry, group: str, c: FieldChange) -> str:
    """`conflict`/`shared`, `ignored`, `drift` (another manager wrote it) or `planned`/`applied` (Git's)."""
    return field_kind(group, c.reason, shared=e.shared is not None, dry_run=cs.dry_run)


# What means something to Markdown inside a table cell (emphasis, code, links, strike-through, the cell
# border): escaped with a backslash. Line-start markers (`#`, `>`, `-`) cannot occur mid-row.
_MD_SPECIAL: Final = re.compile(r"([\\`*_\[\]|~])")


def _md(text: str) -> str:
    """Plain text for a Markdown table cell: markup characters escaped, `<` and `&` as entities
    (no HTML from a value), line breaks as `<br>` (a raw newline would end the table row)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return text.replace("\r\n", "<br>").replace("\n", "<br>").replace("\r", "<br>")


def _code(text: str) -> str:
    """A code span holding `text` literally, whatever backticks it contains (CommonMark: a longer fence);
    `|` escaped (GFM reads it as a cell border even in a code span), newlines shown as `\\n`."""
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def exit_code_diff(cs: ChangeSet) -> int:
    """`kubectl diff`/`flux diff`: 0 in sync, 1 differences or conflicts (a Terminating object too), 2 error."""
    if cs.has_errors:
        return 2
    return 1 if cs.has_changes or cs.has_conflicts else 0


def exit_code_sync(cs: ChangeSet) -> int:
    """0 applied cleanly, 1 not converged though nothing failed (conflicts left unresolved, a deletion
    pending: the cluster is not what Git says yet, and a later run can change that), 2 error."""
    if cs.has_errors:
        return 2
    return 1 if cs.has_conflicts or cs.has_pending else 0


__all__ = ["Entry", "exit_code_diff", "exit_code_sync", "markdown", "table", "write", "write_clusters"]
