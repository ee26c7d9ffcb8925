"""Reports are plain text in every format, never cut off a terminal, and keep the `-dirty` marker."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re

import pytest

from gitops_sync import report
from gitops_sync.plan.changeset import (
    GIT_CHANGED,
    LIVE_CHANGED,
    SERVER_CHANGED,
    Action,
    ChangeSet,
    CoOwner,
    Entry,
    FieldChange,
)
from gitops_sync.resource import ObjectKey
from gitops_sync.source import short_revision

SHA = "3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345"
KEY = ObjectKey("apps", "Deployment", "prod", "minha-api")
LONG_PATH = '.spec.template.spec.containers[name="api-with-a-rather-long-container-name"].image'
LONG_IMAGE = "registry.example/minha-api-with-a-very-long-repository-name/and-a-path:v1.2.3-build.4567890"


def changeset(*changes: FieldChange, revision: str = SHA, message: str = "would update 1 field(s)") -> ChangeSet:
    entry = Entry(KEY, "apps/v1", Action.UPDATE, drift=list(changes), message=message)
    return ChangeSet(revision=revision, source="clusters/prod", entries=[entry], dry_run=True)


def table_text(cs: ChangeSet, *, terminal: bool, verbose: bool = False) -> str:
    out = io.StringIO()
    report.write(cs, "table", out, color=False, terminal=terminal, verbose=verbose)
    return out.getvalue()


def test_markup_in_values_is_printed_literally_not_interpreted() -> None:
    """`[/]` made rich raise MarkupError after a sync had applied; `[name="api"]` vanished as a tag."""
    cs = changeset(
        FieldChange('.spec.template.spec.containers[name="api"].args', "[/]", "[bold]x[/bold] :smile:"),
        message="[/] [red]not red[/red]",
    )
    text = table_text(cs, terminal=False)
    assert '.spec.template.spec.containers[name="api"].args' in text
    assert "[/]" in text and "[bold]x[/bold] :smile:" in text and "[/] [red]not red[/red]" in text


def test_off_a_terminal_nothing_is_cut() -> None:
    cs = changeset(FieldChange(LONG_PATH, LONG_IMAGE, LONG_IMAGE.replace("v1.2.3", "v9.9.9"), "kubectl-edit"))
    text = table_text(cs, terminal=False)
    assert LONG_PATH in text
    assert LONG_IMAGE in text and LONG_IMAGE.replace("v1.2.3", "v9.9.9") in text
    assert "…" not in text


def test_on_a_terminal_the_table_follows_its_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    cs = changeset(FieldChange(LONG_PATH, LONG_IMAGE, "x", "kubectl-edit"))
    text = table_text(cs, terminal=True)
    assert max(len(line) for line in text.splitlines()) <= 100
    # Folded, never cut: the path is all there once the line breaks are taken out.
    flat = "".join(line.strip(" │┃|") for line in text.splitlines())
    assert "containers[name=" in flat


def test_many_co_owned_fields_are_all_listed_off_a_terminal() -> None:
    fields = [f".data.key{i}" for i in range(10)]
    cs = changeset(FieldChange(".data.a", "1", "2"))
    cs.entries[0].co_owners = [CoOwner("helm", "Update", "", fields)]
    assert all(f in table_text(cs, terminal=False) for f in fields)


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_dirty_marker_survives_shortening(fmt: str) -> None:
    cs = changeset(revision=SHA + "-dirty")
    out = io.StringIO()
    report.write(cs, fmt, out, color=False, terminal=False)
    assert f"{SHA[:12]}-dirty" in out.getvalue()
    assert short_revision(SHA + "-dirty") == SHA[:12] + "-dirty"
    assert short_revision(SHA) == SHA[:12]
    assert short_revision("") == ""


def test_markdown_escapes_what_breaks_a_table_row() -> None:
    cs = changeset(
        FieldChange(".data.a", "x|y `tick` <img src=x>\nsecond line", "``double``", "kubectl-edit", "Update"),
        message="a|b <script> *not bold* [not](link)\nnext",
    )
    md = report.markdown(cs)
    row = next(line for line in md.splitlines() if line.startswith("| planned change"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 4  # three cells: no stray border from the message
    assert "a\\|b &lt;script> \\*not bold\\* \\[not\\](link)<br>next" in row
    field_row = next(line for line in md.splitlines() if ".data.a" in line)
    assert len(re.findall(r"(?<!\\)\|", field_row)) == 7  # six cells
    # Values are code spans fenced longer than any backtick run inside; `|` escaped; newline shown as \n.
    assert "``x\\|y `tick` <img src=x>\\nsecond line``" in field_row
    assert "``` ``double`` ```" in field_row
    assert "<img" not in md.replace("``x\\|y `tick` <img src=x>", "")  # raw HTML only inside code spans


def test_json_keeps_values_exactly() -> None:
    cs = changeset(FieldChange('.spec.x[name="api"]', "[/]", "a|b\n`c`"))
    out = io.StringIO()
    report.write(cs, "json", out)
    doc = json.loads(out.getvalue())
    drift = doc["objects"][0]["drift"][0]
    assert drift["path"] == '.spec.x[name="api"]' and drift["desired"] == "[/]" and drift["live"] == "a|b\n`c`"


def test_a_table_into_a_closed_pipe_is_a_broken_pipe_for_the_caller() -> None:
    """rich handled it itself with SystemExit(1) (Console.on_broken_pipe): `sync | head` closing early made a
    sync that had applied cleanly exit 1. The caller (the CLI) decides: its command's own exit code."""
    read, write = os.pipe()
    os.close(read)
    out = io.TextIOWrapper(io.FileIO(write, "w"), write_through=True)
    try:
        with pytest.raises(BrokenPipeError):
            report.write(changeset(), "table", out, color=False, terminal=False)
    finally:
        with contextlib.suppress(BrokenPipeError):
            out.close()


def pull_request() -> ChangeSet:
    """What a pull request's `diff` sees: Git changes an image (git-changed) and drops a default the server
    restores (server-changed), kubectl scaled (live-changed), one object is new, one left Git, one only drifted."""
    web = Entry(
        KEY,
        "apps/v1",
        Action.UPDATE,
        drift=[
            FieldChange(
                '.spec.template.spec.containers[name="api"].image',
                "app:2",
                "app:1",
                "gitops-sync",
                "Apply",
                reason=GIT_CHANGED,
                source="apps/web.yaml:18:20",
            ),
            FieldChange(
                '.spec.template.spec.containers[name="api"].imagePullPolicy',
                "IfNotPresent",
                "Always",
                "gitops-sync",
                "Apply",
                reason=SERVER_CHANGED,
                source="apps/web.yaml:17:11",
            ),
            FieldChange(
                ".spec.replicas",
                2,
                4,
                "kubectl",
                "Update",
                "scale",
                "kubectl scale",
                reason=LIVE_CHANGED,
                since="2026-12-01T10:00:00Z",
                source="apps/web.yaml:8:13",
            ),
        ],
        message="would update 3 field(s)",
    )
    scaled = Entry(
        ObjectKey("apps", "Deployment", "prod", "api"),
        "apps/v1",
        Action.UPDATE,
        drift=[FieldChange(".spec.replicas", 1, 5, "kubectl", "Update", "scale", reason=LIVE_CHANGED)],
        message="would update 1 field(s)",
    )
    new = Entry(ObjectKey("", "ConfigMap", "prod", "new"), "v1", Action.CREATE, message="would create")
    gone = Entry(ObjectKey("", "ConfigMap", "prod", "gone"), "v1", Action.PRUNE, message="would delete (left Git)")
    return ChangeSet(revision=SHA, source="clusters/prod", entries=[web, scaled, new, gone], dry_run=True)


def _md_rows(md: str) -> dict[str, list[str]]:
    """First cell (or object and path) -> the row's cells, for the object and field tables."""
    out: dict[str, list[str]] = {}
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith(("| change ", "| object ")):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            out[" ".join(cells[:3]) if len(cells) > 3 else cells[1]] = cells
    return out


def test_a_pull_request_report_calls_what_git_changes_planned_and_only_live_changes_drift() -> None:
    """`diff -o markdown` labelled every field of `drift` (git-changed too) "drift": a reviewer read a planned
    image change as someone's edit. Fails on the code before: no "planned" at all."""
    md = report.markdown(pull_request())
    rows = _md_rows(md)
    assert rows["`Deployment.apps/prod/minha-api`"][0] == "planned change, drift"
    assert rows["`Deployment.apps/prod/api`"][0] == "drift"  # only kubectl's edit: drift, nothing planned
    assert rows["`ConfigMap/prod/new`"][0] == "planned create"
    assert rows["`ConfigMap/prod/gone`"][0] == "planned delete"
    fields = {cells[2]: cells for key, cells in rows.items() if len(cells) > 3 and "minha-api" in key}
    image = fields['`.spec.template.spec.containers[name="api"].image`']
    assert image[1] == "planned" and image[6] == "git-changed" and image[7] == "`apps/web.yaml:18:20`"
    assert fields['`.spec.template.spec.containers[name="api"].imagePullPolicy`'][1] == "planned"
    replicas = fields["`.spec.replicas`"]
    assert replicas[1] == "drift" and replicas[6].startswith("live-changed by kubectl (Update/scale)")
    assert sum(cells[1] == "drift" for cells in rows.values() if len(cells) > 3) == 2  # both live-changed
    # after a sync the same fields were applied, not planned; drift is still drift
    applied = pull_request()
    applied.dry_run = False
    rows = _md_rows(report.markdown(applied))
    assert rows["`Deployment.apps/prod/minha-api`"][0] == "change, drift"
    assert {cells[1] for cells in rows.values() if len(cells) > 3} == {"applied", "drift"}


def test_the_table_labels_fields_as_markdown_does() -> None:
    text = table_text(pull_request(), terminal=False)
    image = next(line for line in text.splitlines() if "].image" in line)
    replicas = next(line for line in text.splitlines() if "minha-api" in line and ".spec.replicas" in line)
    assert " planned " in image and " drift " not in image
    assert " drift " in replicas and "live-changed by kubectl" in replicas
