"""README.md and docs/*.md document every command's flags: read the click command tree (no subprocess) and
the flag tables of those files, and fail when one names a flag, default or variable the other does not have.

Why: ten people adding flags in a day left some only in `--help`; this keeps the docs the reference. The
reference lives in docs/commands.md; the README holds the front door, so the flags are looked for in both.
Links between the files are checked by tests/unit/test_doc_links.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from gitops_sync.cli import main

ROOT = Path(__file__).resolve().parents[3]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Every documentation file, one after the other: a flag may be documented in any of them.
DOCS = "\n".join(path.read_text(encoding="utf-8") for path in DOC_FILES)


def _commands(command: click.Command, path: tuple[str, ...], ctx: click.Context) -> Iterator[tuple[str, click.Command]]:
    """Every command with its full name; the group loads `run` and the fleet's commands lazily."""
    yield " ".join(("gitops-sync", *path)), command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            yield from _commands(sub, (*path, name), click.Context(sub, info_name=name, parent=ctx))


COMMANDS = list(_commands(main, (), click.Context(main, info_name="gitops-sync")))
OPTIONS = [(name, p) for name, cmd in COMMANDS for p in cmd.params if isinstance(p, click.Option)]
LONG = sorted({o for _, p in OPTIONS for o in (*p.opts, *p.secondary_opts) if o.startswith("--")} - {"--help"})
ALL_FLAGS = {o for _, p in OPTIONS for o in (*p.opts, *p.secondary_opts)} | {"-h", "--help"}


def _mentioned(flag: str, text: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text) is not None


def _table_rows() -> list[tuple[str, str]]:
    """(first cell, whole row) of every table row in README.md and docs/*.md whose first cell is a flag."""
    rows = []
    for line in DOCS.splitlines():
        m = re.match(r"\|\s*(`-[^|]*(?:\\\|[^|]*)*)\|", line)
        if m:
            rows.append((m.group(1), line))
    return rows


ROWS = _table_rows()


@pytest.mark.parametrize("flag", LONG)
def test_every_long_option_of_every_command_is_in_the_readme(flag: str) -> None:
    assert _mentioned(flag, DOCS), f"{flag} is in --help but not in README.md nor docs/*.md"


def test_every_flag_in_a_readme_table_exists_in_the_cli() -> None:
    assert len(ROWS) > 40, "the flag tables of README.md and docs/*.md were not found"
    unknown = []
    for cell, _ in ROWS:
        for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", cell):
            if flag not in ALL_FLAGS:
                unknown.append((cell.strip(), flag))
    assert not unknown, f"flag tables in README.md or docs/*.md name flags no command has: {unknown}"


def _default_texts(option: click.Option) -> list[str]:
    """How a default may be written in the docs: `5m`, 60 for 60.0, `force`."""
    value = option.default  # click marks "no default" with a sentinel of its own: only plain values count
    if option.is_flag or option.multiple or isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return []
    if isinstance(value, float):
        return [f"{value:g}"]
    return [str(value)]


def _flag_rows_of(option: click.Option) -> list[str]:
    return [row for cell, row in ROWS if any(_mentioned(o, cell) for o in option.opts if o.startswith("--"))]


@pytest.mark.parametrize(("command", "option"), OPTIONS, ids=[f"{c}:{o.name}" for c, o in OPTIONS])
def test_every_default_is_in_the_readme_row_of_its_flag(command: str, option: click.Option) -> None:
    """A flag that has a table row states its default there (the log flags are described in prose)."""
    rows = _flag_rows_of(option)
    texts = _default_texts(option)
    if not rows or not texts:
        return
    pattern = r"(?<![\w.])" + "|".join(re.escape(t) for t in texts) + r"(?![\w.])"
    assert any(re.search(pattern, row) for row in rows), (
        f"{command} {option.opts[-1]}: default {option.default!r} is not in its row(s) in the docs: {rows}"
    )


def test_every_variable_a_flag_reads_is_in_the_readme() -> None:
    variables = {v for _, p in OPTIONS for v in ([p.envvar] if isinstance(p.envvar, str) else p.envvar or [])}
    assert variables, "no option declares a variable: the test reads the wrong tree"
    missing = sorted(v for v in variables if not _mentioned(v, DOCS))
    assert not missing, f"variables read by flags but not in README.md nor docs/*.md: {missing}"
