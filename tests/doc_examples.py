"""The GitSync examples of the documentation, as a reader copies them: every YAML document of kind GitSync in a
fenced ```yaml block, or in a heredoc (`<<'EOF'` … `EOF`) of a fenced ```sh block, of README.md and docs/*.md;
and a ```yaml block holding only a `spec:` (a fragment, such as fleet.md's spec.kubeConfig), as the spec of a
GitSync `fragment` in namespace `default`.

Read by tests/unit/test_doc_gitsync_examples.py (each parsed and checked against the shipped CRD's schema) and
tests/integration/test_doc_gitsync_examples_apiserver.py (each sent to the real API server with a server-side dry run).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gitops_sync.daemon.fleet.gitsync import API_VERSION

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CRD_FILE = ROOT / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"
_FENCED = re.compile(r"^```(yaml|sh)\n(.*?)^```", re.S | re.M)
_HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?\n(.*?)^\1$", re.S | re.M)


@dataclass(frozen=True)
class Example:
    doc: str  # the file, relative to the repository
    line: int  # of the fenced block's opening
    obj: dict[str, Any]

    def __str__(self) -> str:
        return f"{self.doc}:{self.line} GitSync {self.obj.get('metadata', {}).get('name')}"


def _yaml_texts(lang: str, body: str) -> list[str]:
    return [body] if lang == "yaml" else [m.group(2) for m in _HEREDOC.finditer(body)]


def _gitsyncs(body: str) -> list[dict[str, Any]]:
    if "kind: GitSync" in body:
        return [o for o in yaml.safe_load_all(body) if isinstance(o, dict) and o.get("kind") == "GitSync"]
    if not body.startswith("spec:\n"):
        return []
    meta = {"name": "fragment", "namespace": "default"}
    return [{"apiVersion": API_VERSION, "kind": "GitSync", "metadata": meta, **yaml.safe_load(body)}]


def gitsync_examples(path: Path) -> list[Example]:
    """Every GitSync of the file's fenced blocks, in order. A block that is not YAML fails (a reader's
    `kubectl apply` would too)."""
    text, found = path.read_text(), []
    for block in _FENCED.finditer(text):
        line = text.count("\n", 0, block.start()) + 1
        for body in _yaml_texts(block.group(1), block.group(2)):
            found += [Example(str(path.relative_to(ROOT)), line, obj) for obj in _gitsyncs(body)]
    return found


def all_gitsync_examples() -> list[Example]:
    return [ex for path in DOC_FILES for ex in gitsync_examples(path)]
