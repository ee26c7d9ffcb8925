"""Property-based fuzzing of the YAML/JSON loader and the renderer, with Hypothesis.

Properties: whatever the text or the manifest's shape, loading and rendering either succeed or raise a
RenderError (never another exception, never a hang), no message ever contains a Secret value, and what
renders can go on to the next stages (masking, YAML and JSON output) without a RecursionError or a leak.
Examples are derandomised (the same ones on every run, so CI is not flaky) and bounded so the file runs
in well under 60 s. One row per property goes to RELIABILITY.md, with the number of examples tried.
"""

from __future__ import annotations

import json
import string
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitops_sync.errors import RenderError
from gitops_sync.plan.masking import mask_secret
from gitops_sync.render import RenderOptions, render, to_yaml
from gitops_sync.render._yaml import load_json, load_yaml

if TYPE_CHECKING:
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.timeout(120)  # a hang fails the test instead of stalling the suite

FUZZ = settings(
    max_examples=400,
    deadline=5000,  # ms per example: a slow path (an unbounded expansion) fails loudly, load spikes do not
    derandomize=True,
    database=None,  # nothing written into the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
OPTIONS = RenderOptions(max_yaml_nodes=50_000, max_render_nodes=100_000)

# YAML's significant characters weigh more than letters: that is where the loader's paths split.
YAML_CHARS = ":-[]{}&*!|>'\"#%@`,?\n \t\\<=~." + "abckv01" + "\x00\x07\u00e9\ufeff"
TAGS = [
    "!!int", "!!float", "!!bool", "!!null", "!!str", "!!binary", "!!timestamp", "!!set", "!!omap", "!!pairs",
    "!!seq", "!!map", "!!merge", "!!value", "!!python/object:os.system", "!local", "!<tag:yaml.org,2002:int>",
    "!<!>", "!!", "!e!x",
]  # fmt: skip
SECRET_PREFIX = "S3cr3tV"
secret_values = st.text(string.ascii_letters + string.digits + "-_/+@:", min_size=8, max_size=24).map(
    lambda s: SECRET_PREFIX + s
)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=12), secret_values
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=25,
)


class Tally:
    """Examples tried and how each ended, for the row."""

    def __init__(self) -> None:
        self.tried = 0
        self.rendered = 0
        self.refused = 0
        self.started = time.perf_counter()

    def run(self, fn: Callable[[], Any]) -> RenderError | None:
        self.tried += 1
        try:
            fn()
        except RenderError as err:
            self.refused += 1
            return err
        self.rendered += 1
        return None

    def record(self, reliability: Recorder, *, fault: str, outcome: str, checked: str) -> None:
        """After the property ran: both outcomes were reached (the property can fail), then the row."""
        assert self.tried >= 400 and self.refused > 0 and self.rendered > 0, vars(self)
        seconds = time.perf_counter() - self.started
        figures = f"{self.tried} examples: {self.rendered} rendered, {self.refused} RenderError; {seconds:.1f} s"
        reliability.record(area="fuzz", fault=fault, outcome=outcome, checked=checked, figures=figures)


def downstream(root: Path) -> None:
    """Render, then what comes after: masked YAML and JSON output must work for whatever rendered."""
    for obj in render(root, OPTIONS):
        masked = mask_secret(obj.manifest)
        to_yaml([masked]) + json.dumps(masked)
        if obj.kind == "Secret" and not obj.key.group:
            values = json.dumps([masked.get("data"), masked.get("stringData")])
            assert SECRET_PREFIX not in values, "a Secret value survived masking"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


def test_fuzz_load_yaml_random_text(reliability: Recorder) -> None:
    tally = Tally()

    @FUZZ
    @given(st.text(YAML_CHARS, max_size=300) | st.binary(max_size=200))
    def prop(data: str | bytes) -> None:
        tally.run(lambda: load_yaml(data, "f.yaml", 20_000))

    prop()
    tally.record(
        reliability,
        fault="`load_yaml` on random text and bytes (YAML punctuation, tags, anchors, control characters, BOM)",
        outcome="every example loaded or raised RenderError; no other exception, none over the 5 s deadline",
        checked="no exception type other than RenderError escaped",
    )


def test_fuzz_load_json_random_text(reliability: Recorder) -> None:
    tally = Tally()
    json_text = st.recursive(
        st.sampled_from(["1", "-0.5e9", "true", "null", '"s"', '"\\ud800"', "NaN", "1" * 5000, ""]),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
            st.lists(st.tuples(st.sampled_from(['"a"', '"b"', "c"]), inner), max_size=3).map(
                lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}"
            ),
        ),
        max_leaves=20,
    )

    @FUZZ
    @given(json_text | st.binary(max_size=100))
    def prop(data: str | bytes) -> None:
        raw = data.encode() if isinstance(data, str) else data
        tally.run(lambda: load_json(raw, "f.json"))

    prop()
    tally.record(
        reliability,
        fault="`load_json` on random JSON-ish text and bytes (lone surrogates, NaN, 5,000-digit numbers, empty)",
        outcome="every example loaded or raised RenderError",
        checked="no exception type other than RenderError escaped",
    )


@st.composite
def manifests(draw: st.DrawFn) -> tuple[Any, list[str]]:
    """A document shaped like a manifest with random values where the renderer validates types."""
    secrets: list[str] = []

    def secret() -> str:
        value = draw(secret_values)
        secrets.append(value)
        return value

    kind = draw(st.sampled_from(["Secret", "ConfigMap", "Deployment", "List", "SecretList", "Widget", 5, None]))
    doc: dict[str, Any] = {
        "apiVersion": draw(st.sampled_from(["v1", "apps/v1", "example.com/v1", "", 1, None])),
        "kind": kind,
    }
    meta_shape = draw(st.sampled_from(["ok", "random", "missing"]))
    if meta_shape == "ok":
        doc["metadata"] = {
            "name": draw(st.sampled_from(["a", "b", "", None, 3])) if draw(st.booleans()) else "n",
            "namespace": draw(st.one_of(st.none(), st.sampled_from(["ns", ""]), json_values)),
            "labels": draw(st.one_of(st.none(), st.dictionaries(st.text(max_size=5), json_values, max_size=3))),
            "annotations": draw(json_values),
        }
    elif meta_shape == "random":
        doc["metadata"] = draw(json_values)
    for field in draw(st.sets(st.sampled_from(["data", "stringData", "spec", "items"]))):
        shape = draw(st.sampled_from(["map-of-secrets", "random", "secret-scalar", "nested-secret"]))
        if shape == "map-of-secrets":
            doc[field] = {f"k{i}": secret() for i in range(draw(st.integers(0, 3)))}
        elif shape == "secret-scalar":
            doc[field] = secret()
        elif shape == "nested-secret":
            doc[field] = {"k": [{"deep": secret()}]}
        else:
            doc[field] = draw(json_values)
    return doc, secrets


def test_fuzz_render_random_manifest_shapes(repo: Path, reliability: Recorder) -> None:
    tally = Tally()

    @FUZZ
    @given(st.lists(manifests(), min_size=1, max_size=3), st.sampled_from([".yaml", ".json"]))
    def prop(docs: list[tuple[Any, list[str]]], suffix: str) -> None:
        values = [d for d, _ in docs]
        text = json.dumps(values) if suffix == ".json" else yaml.safe_dump_all(values)
        for old in repo.iterdir():
            old.unlink()
        (repo / f"m{suffix}").write_text(text)
        err = tally.run(lambda: downstream(repo))
        for secret in (s for _, secrets in docs for s in secrets):
            assert err is None or secret not in str(err), str(err)

    prop()
    tally.record(
        reliability,
        fault="`render` of random manifest shapes (random nested values in metadata, labels, annotations, "
        "data, stringData, items; wrong kinds and names; YAML and JSON)",
        outcome="every example rendered (and then masked and printed as YAML and JSON) or raised RenderError",
        checked="no other exception, and no Secret value in any message or in the masked output",
    )


def test_fuzz_render_random_tags_on_secret_values(repo: Path, reliability: Recorder) -> None:
    tally = Tally()
    head = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n"

    @FUZZ
    @given(
        st.lists(st.tuples(st.sampled_from(TAGS), secret_values, st.sampled_from(["", "'", '"'])), min_size=1,
                 max_size=4),
        st.sampled_from(["data", "stringData", "metadata.labels", "metadata.annotations"]),
    )  # fmt: skip
    def prop(entries: list[tuple[str, str, str]], where: str) -> None:
        if where.startswith("metadata."):  # a map under metadata: indented one level more
            block, indent = f"  {where.split('.')[1]}:\n", "    "
        else:
            block, indent = f"{where}:\n", "  "
        lines = "".join(f"{indent}k{i}: {tag} {q}{value}{q}\n" for i, (tag, value, q) in enumerate(entries))
        text = head + block + lines
        (repo / "s.yaml").write_text(text)
        err = tally.run(lambda: downstream(repo))
        for _, value, _ in entries:
            assert err is None or value not in str(err), str(err)
            assert err is None or value[len(SECRET_PREFIX) :] not in str(err), str(err)

    prop()
    tally.record(
        reliability,
        fault="Secret values under random YAML tags (`!!int`, `!!float`, `!!bool`, `!!binary`, `!!set`, "
        "`!!python/object`, local tags, …), plain and quoted, in data, stringData, labels, annotations",
        outcome="every example rendered or raised RenderError naming file:line and Secret/s",
        checked="no Secret value (nor its random part) in any message",
    )


def test_fuzz_render_random_nesting_depth(repo: Path, reliability: Recorder) -> None:
    tally = Tally()

    @FUZZ
    @given(st.integers(1, 400), st.lists(st.sampled_from(["[", "{k: "]), min_size=1, max_size=6), st.booleans())
    def prop(depth: int, pattern: list[str], flow: bool) -> None:
        if flow:  # the pattern of `[` and `{k: ` repeated to `depth` levels
            openers = [pattern[i % len(pattern)] for i in range(depth)]
            body = "".join(openers) + "x" + "".join("]" if o == "[" else "}" for o in reversed(openers))
        else:  # block mappings, one level per line
            body = "\n" + "".join(f"{'  ' * (i + 1)}k{i}:\n" for i in range(depth)) + "  " * (depth + 1) + "x"
        (repo / "d.yaml").write_text(f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: d}}\ndata: {body}\n")
        err = tally.run(lambda: downstream(repo))
        if err is not None:
            assert "nested more than 100 levels deep" in str(err) or "invalid YAML" in str(err), str(err)

    prop()
    tally.record(
        reliability,
        fault="documents nested 1 to 400 levels deep (flow and block style)",
        outcome="up to 100 levels rendered and printed; deeper ones a RenderError, never a RecursionError",
        checked="no exception other than RenderError; the masking and output stages ran on every success",
    )
