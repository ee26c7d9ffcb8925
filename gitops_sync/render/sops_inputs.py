"""SOPS-encrypted inputs of kustomize and helm, decrypted into a private copy that the tool reads.

kustomize and helm read their files themselves, so an encrypted input must be plaintext in a file while the
tool runs: never in the clone or the cache, but in a directory made for this render (mode 0700, the files
0600) and removed as soon as the tool has run (`private_dir`). What is decrypted:

- a kustomization's `resources:` file holding Secrets only (as a plain manifest file may);
- a `secretGenerator`'s `files:` and `envs:` inputs, in any format sops writes (YAML, JSON, dotenv, INI, and
  binary: the format follows the extension, as sops and Flux decide it);
- a chart's own `values.yaml`, and the `valuesFiles` of a helm-chart.yaml.

Any other encrypted input kustomize would read (a patch, a `configMapGenerator` input, …) is refused naming it;
a sub-chart's or a pulled chart's `values.yaml` and the user's `--helm-values` are refused by render/sops.py.
A decrypted value (a leaf whose ciphertext was `ENC[…]`, of 4 characters or more) found in a rendered object
that is not a Secret is refused too: only Secrets' values are masked in diffs and reports.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from gitops_sync.errors import RenderError
from gitops_sync.render import _tools, sops
from gitops_sync.render._yaml import NodeBudget, load_json, load_yaml, read_bounded
from gitops_sync.resource import DesiredObject

_FORMATS = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".env": "dotenv", ".ini": "ini"}
_DECRYPTED_ROLES = ("resources", "secretGenerator.envs", "secretGenerator.files")
_MIN_GUARDED = 4  # shorter decrypted values are not looked for in other objects (`1`, `on` are everywhere)
_FLAT = re.compile(r"^(\w+?)__list_(\d+)__map_(\w+)$")  # sops' flattened metadata in dotenv and INI files
_MAX_COPY_FILES = 20_000


def input_format(name: str) -> str:
    """sops' store for a file: by its extension, binary for any other (sops' and Flux's rule)."""
    return _FORMATS.get(PurePosixPath(name).suffix.lower(), "binary")


def metadata(data: bytes, fmt: str, name: str) -> list[tuple[int, Any]] | None:
    """The file's documents with their sops metadata (what sops.py reads recipients from); None when it is
    not SOPS-encrypted (or does not parse: then it is not sops' either)."""
    if b"sops" not in data:
        return None
    if fmt in ("dotenv", "ini"):
        meta = _flat_metadata(data.decode("utf-8", "replace"), fmt)
        return [(1, {"sops": meta})] if "mac" in meta else None
    budget = NodeBudget(1_000_000, 1_000_000, 100)
    try:
        docs = load_yaml(data, name, budget) if fmt == "yaml" else load_json(data, name, budget)
    except RenderError:
        return None
    return docs if sops.encrypted(docs) else None


def _flat_metadata(text: str, fmt: str) -> dict[str, Any]:
    """sops' metadata of a dotenv (`sops_age__list_0__map_recipient=…`) or INI (`[sops]` section) file."""
    meta: dict[str, Any] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if fmt == "ini" and line.startswith("["):
            section = line.strip("[]").strip()
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or (fmt == "dotenv" and not key.startswith("sops_")) or (fmt == "ini" and section != "sops"):
            continue
        key = key.removeprefix("sops_") if fmt == "dotenv" else key
        flat = _FLAT.match(key)
        if flat and int(flat.group(2)) < 64:
            entries = meta.setdefault(flat.group(1), [])
            entries.extend({} for _ in range(int(flat.group(2)) + 1 - len(entries)))
            entries[int(flat.group(2))][flat.group(3)] = value
        elif key == "mac":
            meta["mac"] = value
    return meta


@dataclass
class Decrypted:
    """What a tool's inputs gave in plaintext: the values that were encrypted (kept out of non-Secret objects
    and of the tool's error output) and the files (for messages)."""

    values: set[str] = field(default_factory=set, repr=False)
    files: list[str] = field(default_factory=list)

    def add(self, cipher: bytes, plain: bytes, fmt: str, name: str) -> None:
        self.values |= _secret_values(cipher, plain, fmt, name)
        self.files.append(name)


def _secret_values(cipher: bytes, plain: bytes, fmt: str, name: str) -> set[str]:
    """The plaintext of every value the file held encrypted (`ENC[…]`)."""
    if fmt == "binary":
        text = plain.decode("utf-8", "replace")
        return {text, text.strip(), *(ln.strip() for ln in text.splitlines())} - {""}
    if fmt in ("dotenv", "ini"):
        before = dict(_pairs(cipher))
        return {v for k, v in _pairs(plain) if before.get(k, "").startswith("ENC[")}
    budget = NodeBudget(1_000_000, 1_000_000, 100)
    load = load_yaml if fmt == "yaml" else load_json
    out: set[str] = set()
    for (_, enc), (_, dec) in zip(load(cipher, name, budget), load(plain, name, budget), strict=False):
        _leaves(enc, dec, out)
    return out


def _pairs(data: bytes) -> Iterator[tuple[str, str]]:
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith(("#", ";")):
            yield key.strip(), value.strip()


def _leaves(enc: Any, dec: Any, out: set[str]) -> None:
    if isinstance(enc, str) and enc.startswith("ENC["):
        if isinstance(dec, (str, int, float)) and not isinstance(dec, bool):
            out.add(str(dec))
    elif isinstance(enc, Mapping) and isinstance(dec, Mapping):
        for key in enc:
            if key != "sops" and key in dec:
                _leaves(enc[key], dec[key], out)
    elif isinstance(enc, list) and isinstance(dec, list):
        for e, d in zip(enc, dec, strict=False):
            _leaves(e, d, out)


def seal(objects: Sequence[DesiredObject], found: Decrypted, label: str) -> None:
    """A tool's objects made of decrypted inputs: refused when a decrypted value is in anything but a Secret
    (its diff would show it), else marked so that no render cache writes them to disk."""
    values = [v for v in found.values if len(v) >= _MIN_GUARDED]
    forms = {f for v in values for f in (json.dumps(v)[1:-1], base64.b64encode(v.encode()).decode())}
    for obj in objects:
        m = obj.manifest
        if not (m.get("apiVersion") == "v1" and m.get("kind") == "Secret"):
            text = json.dumps(m)
            if any(f in text for f in forms):
                raise RenderError(
                    f"a value decrypted from {', '.join(found.files)} ends up in {m.get('kind')} "
                    f"{(m.get('metadata') or {}).get('name')}: only Secrets may carry decrypted values (only "
                    "theirs are masked in diffs and reports)",
                    file=label,
                )
        sops.mark(obj)


@dataclass(frozen=True)
class Input:
    path: Path  # resolved, inside the repository
    name: str  # as the repository names it
    fmt: str
    data: bytes
    docs: list[tuple[int, Any]]
    key: str = ""  # the kustomization entry naming it (`resources`, `secretGenerator.files`, …)


def kustomize_inputs(files: Mapping[Path, tuple[str, str]], boundary: Path, limit: int) -> list[Input]:
    """The encrypted files among those a kustomization tree names (`files`: path -> (entry, kustomization));
    one kustomize would read as it is (a patch, a configMapGenerator input) is refused naming it."""
    found = []
    for path, (key, kustomization) in sorted(files.items()):
        name = path.relative_to(boundary).as_posix() if path.is_relative_to(boundary) else str(path)
        if path.stat().st_size > limit:  # too large to read whole: sops writes its metadata last
            if _tail_mentions_sops(path):
                raise RenderError(f"a SOPS-encrypted input larger than the {limit}-byte limit", file=name)
            continue
        data = read_bounded(path, name, limit)
        fmt = input_format(name)
        docs = metadata(data, fmt, name)
        if docs is None:
            continue
        if key not in _DECRYPTED_ROLES:
            raise RenderError(
                f"SOPS-encrypted {key} input of {kustomization}: gitops-sync decrypts a kustomization's resources "
                "(Secrets only) and secretGenerator files/envs, nothing else kustomize reads",
                file=name,
            )
        found.append(Input(path, name, fmt, data, docs, key))
    return found


def _tail_mentions_sops(path: Path, size: int = 64 * 1024) -> bool:
    with path.open("rb") as handle:
        handle.seek(max(path.stat().st_size - size, 0))
        return b"sops" in handle.read(size)


@contextlib.contextmanager
def private_dir() -> Iterator[Path]:
    """A directory of this render's only (0700), removed with everything in it when the tool has run."""
    path = Path(tempfile.mkdtemp(prefix="gitops-sync-sops-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def copy_tree(src: Path, dst: Path) -> None:
    """`src` copied to `dst` (new), `.git` left out, symlinks as symlinks (relative ones stay inside)."""
    count = 0
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d != ".git"]
        here = dst / Path(root).relative_to(src)
        here.mkdir(mode=0o700, exist_ok=True)
        for name in [*dirs, *files]:
            source = Path(root, name)
            count += 1
            if count > _MAX_COPY_FILES:
                raise RenderError(
                    f"more than {_MAX_COPY_FILES} files to copy for a SOPS-encrypted input", file=str(src)
                )
            if source.is_symlink():
                os.symlink(os.readlink(source), here / name)
            elif name in files:
                shutil.copyfile(source, here / name)


def write_private(path: Path, data: bytes) -> None:
    """Plaintext into the private copy: 0600, replacing the ciphertext copied there."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


@contextlib.contextmanager
def decrypted_tree(boundary: Path, inputs: Sequence[Input], session: sops.Session) -> Iterator[tuple[Path, Decrypted]]:
    """A private copy of the repository with `inputs` in plaintext, and what they held; removed on the way out.
    A `resources:` file must hold Secrets only."""
    found = Decrypted()
    with private_dir() as base:
        copy = base / (boundary.name or "repo")
        copy_tree(boundary, copy)
        for item in inputs:
            plain = session.decrypt(item.data, item.name, item.docs, item.fmt)
            if item.key == "resources":  # objects: Secrets only, as in a plain manifest file
                load = load_yaml if item.fmt == "yaml" else load_json
                for number, value in load(plain, item.name, NodeBudget(1_000_000, 1_000_000, 100)):
                    sops.check_decrypted(value, f"{item.name}#{number}")
            found.add(item.data, plain, item.fmt, item.name)
            write_private(copy / item.path.relative_to(boundary), plain)
        yield copy, found


def values_file(path: Path, name: str, limit: int) -> Input | None:
    """A Helm values file, when it is SOPS-encrypted."""
    data = read_bounded(path, name, limit)
    fmt = "json" if name.lower().endswith(".json") else "yaml"
    docs = metadata(data, fmt, name)
    return None if docs is None else Input(path, name, fmt, data, docs)


def decrypt_values(item: Input, target: Path, session: sops.Session, found: Decrypted) -> Path:
    """An encrypted values file's plaintext written to `target` (in a private directory)."""
    plain = session.decrypt(item.data, item.name, item.docs, item.fmt)
    found.add(item.data, plain, item.fmt, item.name)
    write_private(target, plain)
    return target


def in_copy(err: RenderError, copy: Path, boundary: Path) -> RenderError:
    """A tool's error about the private copy, naming the repository's files instead."""
    return RenderError(str(err).replace(str(copy), str(boundary)))


def kustomize(
    kubectl: str,
    directory: Path,
    boundary: Path,
    label: str,
    limits: _tools.Limits,
    inputs: Sequence[Input],
    secrets: frozenset[str],
    session: sops.Session,
) -> tuple[str, Decrypted]:
    """`kubectl kustomize` of `directory` in a private copy of the repository with `inputs` decrypted."""
    with decrypted_tree(boundary, inputs, session) as (copy, found):
        try:
            inner = copy / directory.resolve().relative_to(boundary)
            return _tools.kustomize(kubectl, inner, label, limits, {*secrets, *found.values}), found
        except RenderError as err:
            raise in_copy(err, copy, boundary) from None


def chart_values(
    directory: Path, rel: str, chart: Path, scratch: Path, session: sops.Session, limit: int
) -> tuple[Path, Decrypted | None]:
    """The chart helm renders: `chart`, or when the chart's own values.yaml is encrypted, a copy of it in
    `scratch` (the render's private directory, removed after helm ran) holding the plaintext values.yaml."""
    name = f"{rel}/values.yaml" if rel else "values.yaml"
    item = values_file(directory / "values.yaml", name, limit) if (directory / "values.yaml").is_file() else None
    if item is None:
        return chart, None
    if chart == directory:  # not vendored by chart_deps: copy it
        chart = scratch / "sops-chart" / directory.resolve().name
        chart.parent.mkdir(mode=0o700)
        copy_tree(directory, chart)
    found = Decrypted()
    decrypt_values(item, chart / "values.yaml", session, found)
    return chart, found


def source_values(
    paths: Sequence[Path], names: Sequence[str], private: Path, session: sops.Session, limit: int
) -> tuple[list[Path], Decrypted | None]:
    """A helm-chart.yaml's valuesFiles, each encrypted one replaced by its plaintext in `private`."""
    out, found = [], Decrypted()
    for index, (path, name) in enumerate(zip(paths, names, strict=True)):
        item = values_file(path, name, limit)
        out.append(path if item is None else decrypt_values(item, private / f"{index}-{path.name}", session, found))
    return out, (found if found.files else None)


__all__ = [
    "Decrypted",
    "Input",
    "chart_values",
    "copy_tree",
    "decrypt_values",
    "decrypted_tree",
    "in_copy",
    "input_format",
    "kustomize",
    "kustomize_inputs",
    "metadata",
    "private_dir",
    "seal",
    "source_values",
    "values_file",
    "write_private",
]
