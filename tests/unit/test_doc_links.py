"""Every relative link in README.md and docs/*.md leads somewhere: to a file that exists and, with `#anchor`,
to a heading of that file (GitHub's anchor rules).

Why: the README was split into docs/*.md; a section moved again, a file renamed or a heading reworded
leaves links that GitHub renders fine and that lead nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` or `[x](y)` in a code block is neither)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown file's headings; a repeated heading gets `-1`, `-2`, … as on GitHub."""
    seen: dict[str, int] = {}
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            if n:
                seen.setdefault(f"{base}-{n}", 1)
    return set(seen)


def broken_links(files: list[Path], root: Path) -> list[str]:
    """`file: target (why)` for every relative link in `files` (named relative to `root`) that leads nowhere."""
    broken = []
    for path in files:
        for line in _prose_lines(path.read_text(encoding="utf-8")):
            for target in LINK.findall(CODE_SPAN.sub("", line)):  # a `[x](y)` in code is no link
                if re.match(r"[a-zA-Z][\w+.-]*:", target):  # https:, mailto: … are not ours to check
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / unquote(file_part)).resolve() if file_part else path
                if not dest.exists():
                    broken.append(f"{path.relative_to(root)}: {target} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{path.relative_to(root)}: {target} (no such heading in {dest.name})")
    return broken


def test_every_relative_link_in_readme_and_docs_resolves() -> None:
    assert len(DOC_FILES) > 5, "docs/*.md not found: the test reads the wrong directory"
    broken = broken_links(DOC_FILES, ROOT)
    assert not broken, "\n".join(broken)


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    """The checker itself: a link to a file, or to a heading, that is not there is named; code is skipped."""
    (tmp_path / "docs").mkdir()
    other = tmp_path / "docs" / "other.md"
    other.write_text("# Other\n\n## A `flag` (b)\n\n## Same\n\n## Same\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Top\n\n[ok](docs/other.md) [ok](docs/other.md#a-flag-b) [ok](#top) [ok](docs/other.md#same-1)\n"
        "[ok](https://example.com/x#y) ![ok](docs/other.md) `[not a link](nowhere.md)`\n"
        "```sh\n[not a link](nowhere.md)\n```\n"
        "[bad](docs/gone.md) [bad](docs/other.md#nope) [bad](#bottom) [bad](../README.md#top)\n"
    )
    (tmp_path / "docs" / "back.md").write_text("[ok](../README.md#top) [bad](other.md#same-2)\n")
    assert broken_links([readme, other, tmp_path / "docs" / "back.md"], tmp_path) == [
        "README.md: docs/gone.md (no such file)",
        "README.md: docs/other.md#nope (no such heading in other.md)",
        "README.md: #bottom (no such heading in README.md)",
        "README.md: ../README.md#top (no such file)",
        "docs/back.md: other.md#same-2 (no such heading in other.md)",
    ]
