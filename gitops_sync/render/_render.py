"""Walk a directory tree and turn its manifests, kustomizations and charts into desired objects.

Everything here is local and deterministic: no namespace defaulting, no cluster look-ups (the planner
does those with discovery), so `render` gives the same objects for the same tree on any machine.
Every failure is a RenderError naming the file, document and object, and never quoting a value: the
objects go on to the planner, the messages to reports, logs and the daemon's /status.
"""

from __future__ import annotations

import os
import posixpath
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from gitops_sync.errors import RenderError
from gitops_sync.render import _kustomize, _tools, chart_deps, chart_pull, charts, locate, sops, sops_inputs
from gitops_sync.render._kustomize import KUSTOMIZATION_FILES
from gitops_sync.render._objects import is_list as _is_list
from gitops_sync.render._objects import unique
from gitops_sync.render._objects import validate as _validate
from gitops_sync.render._yaml import NodeBudget, load_config, load_json, load_yaml, read_bounded
from gitops_sync.render.snapshot import Snapshot
from gitops_sync.resource import DesiredObject

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class RenderOptions:
    """How to render; the defaults suit a plain repository of manifests."""

    # Extra values files for every chart, given by the user (trusted): a relative path is looked up in
    # the current directory first, then in the repository (where it must stay inside repo_root).
    helm_values: tuple[Path, ...] = ()
    helm_release: str | None = None  # default: the chart directory's name
    namespace: str = "default"  # passed to `helm template --namespace`
    kubectl: str = "kubectl"  # binary for `kubectl kustomize`
    helm: str = "helm"
    max_file_bytes: int = 10 * 1024 * 1024
    max_yaml_nodes: int = 1_000_000  # nodes (aliases expanded) per file
    max_render_nodes: int = 10_000_000  # nodes (aliases expanded) over every file and tool output of a render
    max_depth: int = 100  # nesting levels of one document
    # The repository's top: symlinks may not lead out of it, relative values files start from it.
    # None: the rendered root itself (pass Checkout.repo_root when rendering a --path sub-directory).
    repo_root: Path | None = None
    tool_timeout: float = 300  # seconds for one `kubectl kustomize` / `helm template`
    max_tool_output_bytes: int = 32 * 1024 * 1024  # stdout of one `kubectl kustomize` / `helm template`
    # Kustomizations may name remote bases (URLs, git refs) and paths outside the repository.
    kustomize_allow_external: bool = False
    # Directories of the repository (posix, relative to repo_root) whose files are not there: a Git submodule
    # of a fetched commit, or one not checked out in a work tree. Rendering one (walking into it, a symlink
    # or a kustomization reaching it) is an error naming it, never an empty directory.
    holes: tuple[str, ...] = ()
    # Charts from repositories (helm-chart.yaml, render/charts.py): where pulled archives are kept by digest
    # (the engine passes <clone cache>/; None: a temporary directory per render, so nothing is reused), and the
    # operator's credentials file (None: $GITOPS_SYNC_CHART_CREDENTIALS, else no credentials).
    chart_cache: Path | None = None
    chart_credentials: Path | None = None
    # False: $GITOPS_SYNC_CHART_CREDENTIALS is not read (fleet mode: a tenant's helm-chart.yaml must not be
    # fetched with credentials the operator configured for someone else).
    chart_credentials_env: bool = True
    # Credentials read for this pass from a GitSync's spec.chartCredentials Secrets (as its ServiceAccount):
    # used after the file's entries, never allowing a repository, never in the render cache's key.
    chart_access: tuple[charts.RepositoryAccess, ...] = ()

    def chart_entries(self) -> list[charts.RepositoryAccess]:
        """Every chart credentials entry of this render: the operator's file's, then chart_access."""
        return charts.load_access(self.chart_credentials, env=self.chart_credentials_env, extra=self.chart_access)

    # URL prefixes of the chart repositories the operator allows (--allow-chart-repository); entries of the
    # credentials file are allowed too. Any other repository a helm-chart.yaml or a Chart.yaml dependency
    # names is refused before a request is sent (ChartRepositoryNotAllowed): the repository is untrusted input.
    chart_repositories: tuple[str, ...] = ()
    # Keys for SOPS-encrypted manifest files (render/sops.py); none: such a file is an error naming it.
    decryption: sops.Decryption = field(default_factory=sops.Decryption)


def resolve_chart_sources(root: Path, opts: RenderOptions) -> list[str]:
    """`<file> <version> <digest>` of every helm-chart.yaml under `root`, resolved now (one index/tag request
    each, nothing pulled; the same checks and errors as the render's): with the files, they decide the render
    of a commit, so the render cache keys on them (a range or a re-pushed tag resolves anew without a commit).
    Needs opts.chart_cache (the re-push records)."""
    if opts.chart_cache is None:
        raise ValueError("resolving chart sources needs a chart cache")
    out = []
    entries: list[charts.RepositoryAccess] | None = None
    for path in sorted(root.rglob(charts.CHART_SOURCE_FILE)):
        rel = path.relative_to(root).as_posix()
        if not _walked_to(root, path.parent):
            continue  # in a dot directory, or inside a tree a tool renders whole: the walk never reads it
        spec = charts.load_spec(path, rel)
        if entries is None:
            entries = opts.chart_entries()
        access = charts.access_for(spec.repo, entries, opts.chart_repositories)
        version, digest = chart_pull.resolve(spec, rel, access, opts.chart_cache)
        out.append(f"{rel} {version} {digest}")
    return out


def _walked_to(root: Path, directory: Path) -> bool:
    """The walk reaches `directory` (below `root`): no dot directory on the way, and no directory above it
    rendered whole by a tool (a kustomization, a Chart.yaml, a helm-chart.yaml)."""
    parts = directory.relative_to(root).parts
    if any(p.startswith(".") for p in parts):
        return False
    whole = (*KUSTOMIZATION_FILES, "Chart.yaml", charts.CHART_SOURCE_FILE)
    above = [root.joinpath(*parts[:i]) for i in range(len(parts))]
    return not any((d / name).exists() for d in above for name in whole)


def render(
    root: Path, options: RenderOptions | None = None, *, snapshot: Snapshot | None = None
) -> list[DesiredObject]:
    """All desired objects under `root`, in walk order; raises RenderError naming the file and object.

    `snapshot`: the files of `root` as read once (a plain one: no symlink, no kustomization or chart),
    rendered instead of the disk, so the objects are of exactly those bytes (render/snapshot.py)."""
    opts = options or RenderOptions()
    if snapshot is None and not root.is_dir():
        raise RenderError("not a directory", file=str(root))
    if snapshot is not None and not snapshot.plain:
        raise ValueError("only a plain snapshot renders from memory: kustomize, helm and symlinks read the disk")
    walker = _Walker(root, opts, snapshot)
    try:
        walker.walk(root, "", frozenset())
    except RenderError:
        raise
    except RecursionError:
        raise RenderError("nested too deeply", file=walker.current or walker.name("")) from None
    except OSError as err:
        where = walker.current or walker.name("")
        raise RenderError(f"cannot read: {err.strerror or type(err).__name__}", file=where) from None
    except Exception as err:  # a bug or an input nobody foresaw: name the file, never echo the value
        raise RenderError(f"cannot render ({type(err).__name__})", file=walker.current or walker.name("")) from None
    finally:
        walker.decryptor.close()  # the render's private GNUPGHOME, if a SOPS file needed one
    return unique(walker.objects)


@dataclass
class _Walker:
    root: Path
    opts: RenderOptions
    snapshot: Snapshot | None = None
    objects: list[DesiredObject] = field(default_factory=list)
    boundary: Path = field(init=False)
    holes: frozenset[str] = field(init=False)
    real_root: Path = field(init=False)
    budget: NodeBudget = field(init=False)
    current: str = ""  # the file or directory being rendered, for errors nobody foresaw
    pulled_dependencies: list[dict[str, str]] = field(default_factory=list)  # of the chart _helm rendered last
    top: str = field(init=False)  # the rendered directory as the repository names it (`--path`), or ""
    decryptor: sops.Session = field(init=False)  # SOPS files' decryption (render/sops.py); `render` closes it
    decrypted: sops_inputs.Decrypted | None = None  # what the tool run last read decrypted, for _add_output

    def __post_init__(self) -> None:
        self.decryptor = sops.Session(self.opts.decryption)
        self.budget = NodeBudget(self.opts.max_yaml_nodes, self.opts.max_render_nodes, self.opts.max_depth)
        self.boundary = (self.opts.repo_root or self.root).resolve()
        self.real_root = self.root.resolve()
        if not self.real_root.is_relative_to(self.boundary):
            raise RenderError(f"the rendered directory is outside the repository {self.boundary}", file=str(self.root))
        inner = self.real_root.relative_to(self.boundary).as_posix()
        self.top = "" if inner == "." else inner
        self.holes = frozenset(self.opts.holes)

    def name(self, rel: str) -> str:
        """A directory in messages and origins: its path under the rendered one; the rendered directory itself
        by its `--path` (`apps/web (kustomize)`, not `. (kustomize)`), `.` at the repository's top."""
        return rel or self.top or "."

    def _hole(self, path: Path) -> str | None:
        """The submodule (RenderOptions.holes) that `path`, a resolved path, is or lies in."""
        if not self.holes or not path.is_relative_to(self.boundary):
            return None
        rel = path.relative_to(self.boundary).as_posix()
        return next((h for h in self.holes if rel == h or rel.startswith(h + "/")), None)

    def _check_hole(self, path: Path, rel: str) -> None:
        """Raise when `path` is (in) a submodule whose files are not there; `rel` names what reached it (a
        symlink, a kustomization; "" when the walk itself did)."""
        hole = self._hole(path)
        if hole is not None:
            raise RenderError(
                f"Git submodule {hole}: its files are not in this checkout (gitops-sync does not fetch submodules, "
                "so a fetched or --revision commit never has them; in a work tree run `git submodule update "
                "--init`); refusing to render it as an empty directory",
                file=rel or None,
            )

    def walk(self, directory: Path, rel: str, ancestors: frozenset[Path]) -> None:
        """Sorted, depth-first; a kustomization or chart directory is rendered whole by its tool."""
        self.current = self.name(rel)
        # A snapshot holds no symlink: its directories are where they are spelt.
        real = directory.resolve() if self.snapshot is None else self.real_root.joinpath(rel)
        if real in ancestors:
            raise RenderError("symlink loop: the directory contains itself", file=self.name(rel))
        self._check_hole(real, "")
        entries = self._list(directory, rel)
        names = {e.name for e in entries}
        kustomization = next((n for n in KUSTOMIZATION_FILES if n in names), None)
        if charts.CHART_SOURCE_FILE in names:
            self._chart_source(directory, rel)
            return
        if kustomization is not None or "Chart.yaml" in names:
            self._check_tree_links(directory, rel)
            tool = "kustomize" if kustomization is not None else "helm"
            label = f"{self.name(rel)} ({tool})"
            output = self._kustomize(directory, label) if tool == "kustomize" else self._helm(directory, rel, label)
            sources = locate.helm_sources(output) if tool == "helm" else {}
            pulled = self.pulled_dependencies if tool == "helm" else []  # Chart.yaml dependencies fetched for it
            self._add_output(output, label, rel or ".", sources, {"chart_dependencies": pulled} if pulled else {})
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue  # .git, .github, editor files: never desired state
            path = Path(entry.path)
            entry_rel = f"{rel}/{entry.name}" if rel else entry.name
            is_manifest = entry.name.lower().endswith(MANIFEST_SUFFIXES)
            if entry.is_symlink() and (is_manifest or entry.is_dir()):
                self._check_link(path, entry_rel)
            if entry.is_dir():
                self.walk(path, entry_rel, ancestors | {real})
            elif is_manifest and entry.is_file():
                self.current = entry_rel
                self._load_file(path, entry_rel)

    def _list(self, directory: Path, rel: str) -> list[_Listed]:
        """The directory's entries sorted by name: from the disk, or from the snapshot being rendered."""
        if self.snapshot is not None:
            snap = self.snapshot
            return [_SnapshotEntry(n, directory / n, posixpath.join(rel, n), snap) for n in snap.dirs.get(rel, ())]
        try:
            return sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as err:
            raise RenderError(f"cannot read the directory: {err.strerror}", file=self.name(rel)) from None

    def _check_link(self, path: Path, rel: str) -> None:
        try:
            target = path.resolve()
        except RuntimeError:  # Python 3.11 raises on a loop of file symlinks
            raise RenderError("symlink loop", file=rel) from None
        if not target.is_relative_to(self.boundary):
            raise RenderError(f"symlink leads outside the repository (to {target})", file=rel)
        self._check_hole(target, rel)
        if not target.exists():
            raise RenderError(f"broken symlink (to {target})", file=rel)

    def _check_tree_links(self, directory: Path, rel: str) -> None:
        """kustomize and helm read whatever files they like: every symlink below must stay inside."""
        for top, dirs, files in os.walk(directory):
            dirs[:] = [d for d in dirs if d != ".git"]
            for name in dirs + files:
                path = Path(top, name)
                if name in dirs:
                    inner = path.relative_to(directory).as_posix()
                    self._check_hole(path.resolve(), f"{rel}/{inner}" if rel else inner)
                if path.is_symlink():
                    inner = path.relative_to(directory).as_posix()
                    self._check_link(path, f"{rel}/{inner}" if rel else inner)

    def _load_file(self, path: Path, rel: str) -> None:
        limit = self.opts.max_file_bytes
        if self.snapshot is None:
            data = read_bounded(path, rel, limit)
        else:
            data = self.snapshot.files[rel]
            if len(data) > limit:
                raise RenderError(f"file is larger than the {limit}-byte limit", file=rel)
        docs = self._parse(data, rel)
        secret = sops.encrypted(docs)
        if secret:  # decrypted in memory; only Secrets, marked so that no cache writes them (render/sops.py)
            docs = self._parse(self.decryptor.decrypt(data, rel, docs), rel)
        for number, value in docs:
            origin = f"{rel}#{number}"
            if secret:
                sops.check_decrypted(value, origin)
            self._add(value, origin, origin)
            if secret:
                sops.mark(self.objects[-1])

    def _parse(self, data: bytes, rel: str) -> list[tuple[int, Any]]:
        if rel.lower().endswith(".json"):
            return load_json(data, rel, self.budget)
        return load_yaml(data, rel, self.budget)

    def _add(self, value: Any, origin: str, where: str, *, tool_dir: str = "", source: str = "") -> None:
        """Expand `kind: List` (and `*List` with items), validate, collect.

        A tool's output (`tool_dir` set) names the file each object came from when it can: kustomize's
        origin annotation (removed here, never applied), Helm's `# Source:` comment (`source`)."""
        if isinstance(value, dict) and _is_list(value):
            for index, item in enumerate(value.get("items") or []):
                item_where = f"{where} items[{index}]"
                # A file's items get their own origin; a tool's output keeps `<dir> (tool)`.
                self._add(item, item_where if origin == where else origin, item_where, tool_dir=tool_dir, source=source)
            return
        obj = DesiredObject(_validate(value, where), origin)
        if tool_dir:
            found = locate.take_origin(obj.manifest)
            if found:
                obj.extra["source"] = posixpath.normpath(posixpath.join(tool_dir, found))
            elif source:  # `<chart name>/templates/x.yaml`: the chart is this directory
                rest = source.split("/", 1)[-1]
                obj.extra["source"] = posixpath.normpath(posixpath.join(tool_dir, rest))
        self.objects.append(obj)

    def _kustomize(self, directory: Path, label: str) -> str:
        # Refuse remote bases and paths leaving the repository before kustomize fetches or reads them, and
        # learn the secretGenerator values its error messages might quote.
        external = self.opts.kustomize_allow_external
        found = _kustomize.walk(directory, self.boundary, allow_external=external, check=self._check_hole)
        limits = _tools.Limits(self.opts.tool_timeout, self.opts.max_tool_output_bytes)
        inputs = [] if external else sops_inputs.kustomize_inputs(found.files, self.boundary, self.opts.max_file_bytes)
        if not inputs:  # (with --kustomize-allow-external, kustomize reads them as they are: refused in its output)
            return _tools.kustomize(self.opts.kubectl, directory, label, limits, frozenset(found.secrets))
        args = (self.boundary, label, limits, inputs, frozenset(found.secrets), self.decryptor)
        output, self.decrypted = sops_inputs.kustomize(self.opts.kubectl, directory, *args)
        return output

    def _helm(self, directory: Path, rel: str, label: str) -> str:
        self._check_chart(directory, rel, own_values=True)
        values = self._user_values(label)
        release = self.opts.helm_release or directory.resolve().name
        limits = _tools.Limits(self.opts.tool_timeout, self.opts.max_tool_output_bytes)
        with tempfile.TemporaryDirectory(prefix="gitops-sync-deps-") as scratch:
            opts = self.opts
            access = opts.chart_entries
            cache = opts.chart_cache or Path(scratch) / "cache"
            built = chart_deps.vendor(
                directory, rel, self.boundary, Path(scratch), access, cache, opts.helm, opts.chart_repositories
            )
            self.pulled_dependencies = built.pulled if built is not None else []
            chart = built.directory if built is not None else directory
            chart, self.decrypted = sops_inputs.chart_values(
                directory, rel, chart, Path(scratch), self.decryptor, opts.max_file_bytes
            )
            return _tools.helm_template(self.opts.helm, chart, release, self.opts.namespace, values, label, limits)

    def _user_values(self, label: str) -> list[Path]:
        """The --helm-values files (for every chart), checked like the repository's own values files."""
        values = [self._values_file(given, label) for given in self.opts.helm_values]
        for given, path in zip(self.opts.helm_values, values, strict=True):
            self._check_values(path, str(given))
        return values

    def _chart_source(self, directory: Path, rel: str) -> None:
        """A chart from a repository (helm-chart.yaml): resolved, pulled (or served from the cache by
        digest), checked and rendered; the directory holds its declaration and values files, nothing else is
        rendered from it. Every object's origin names chart, version and digest (reports show it)."""
        file_rel = _join(rel, charts.CHART_SOURCE_FILE)
        self.current = file_rel
        self._check_tree_links(directory, rel)
        spec = charts.load_spec(directory / charts.CHART_SOURCE_FILE, file_rel)
        values = charts.values_paths(spec, directory, file_rel, self.boundary)
        names = [_join(rel, given) for given in spec.values_files]
        for name, path in zip(names, values, strict=True):
            self._check_values(path, name, encrypted_ok=True)
        access = self.opts.chart_entries()
        limits = _tools.Limits(self.opts.tool_timeout, self.opts.max_tool_output_bytes)
        with sops_inputs.private_dir() as private:  # encrypted valuesFiles in plaintext while helm runs
            values, self.decrypted = sops_inputs.source_values(
                values, names, private, self.decryptor, self.opts.max_file_bytes
            )
            output, pulled, label = chart_pull.render_source(
                spec,
                file_rel,
                self.name(rel),
                (values, self._user_values(file_rel)),
                charts.access_for(spec.repo, access, self.opts.chart_repositories),
                self.opts.chart_cache,
                self.opts.helm,
                spec.namespace or self.opts.namespace,
                limits,
                self._check_chart,
                keep=self.decrypted is None,  # helm's output of decrypted values is never kept on disk
            )
        # What the chart is (never where its templates are: they are not in Git, so no `source`).
        self._add_output(output, label, "", {}, {"chart": pulled.report()})

    def _add_output(
        self, output: str, label: str, tool_dir: str, sources: dict[int, str], extra: dict[str, Any]
    ) -> None:
        """A tool's output, the rendering of a whole tree: bounded by bytes and by the render's budget. `extra`
        goes on each of its objects (what was pulled for them, for reports)."""
        budget = replace(self.budget, per_file=sys.maxsize)
        docs = load_yaml(output, label, budget)
        self.budget.used = budget.used
        before = len(self.objects)
        for number, value in docs:
            sops.refuse_in_tool_output(value, f"{label}#{number}")
            self._add(value, label, f"{label}#{number}", tool_dir=tool_dir, source=sources.get(number, ""))
        for obj in self.objects[before:]:
            obj.extra.update(extra)
        found, self.decrypted = self.decrypted, None
        if found is not None:  # made of decrypted inputs: their values in Secrets only, never cached on disk
            sops_inputs.seal(self.objects[before:], found, label)

    def _check_chart(self, directory: Path, rel: str, *, own_values: bool = False) -> None:
        """helm parses a chart's YAML itself: its Chart.yaml (and lock and requirements files) and
        values.yaml, and those of its unpacked sub-charts (`charts/<name>/`), get the bounds of our own
        files first (bytes, aliases expanded, depth), so a hostile one is refused naming the file."""
        seen: set[Path] = set()
        pending = [(directory, rel)]
        while pending:
            chart, chart_rel = pending.pop()
            if (real := chart.resolve()) in seen:
                continue  # a sub-chart symlinked to an ancestor: helm's problem, not a loop of ours
            seen.add(real)
            for name in _CHART_FILES:
                if (chart / name).is_file():
                    load_config(chart / name, _join(chart_rel, name), name)
            if (chart / "values.yaml").is_file():  # encrypted: the rendered chart's own only (sops_inputs.py)
                own = own_values and chart == directory
                self._check_values(chart / "values.yaml", _join(chart_rel, "values.yaml"), encrypted_ok=own)
            charts = chart / "charts"
            if charts.is_dir():
                for sub in sorted(charts.iterdir()):
                    if (sub / "Chart.yaml").is_file():
                        pending.append((sub, _join(chart_rel, f"charts/{sub.name}")))

    def _check_values(self, path: Path, name: str, *, encrypted_ok: bool = False) -> None:
        """A values file read by helm: bounded as a manifest is (its own node budget: nothing is built)."""
        nodes = self.opts.max_yaml_nodes
        data = read_bounded(path, name, self.opts.max_file_bytes)
        docs = load_yaml(data, name, NodeBudget(nodes, nodes, self.opts.max_depth))
        if not encrypted_ok:
            sops.refuse_values(docs, name)

    def _values_file(self, given: Path, label: str) -> Path:
        """A --helm-values file: the user's own (absolute, or relative to the current directory) is
        trusted; one found in the repository must stay inside it like any file the repository names."""
        if given.is_absolute() or (Path.cwd() / given).is_file():
            path = given if given.is_absolute() else Path.cwd() / given
            if not path.is_file():
                raise RenderError(f"values file {given} does not exist", file=label)
            return path
        in_repo = self.boundary / given
        if not in_repo.is_file():
            raise RenderError(
                f"values file {given} does not exist (looked in the current directory {Path.cwd()} "
                f"and in the repository {self.boundary})",
                file=label,
            )
        if not in_repo.resolve().is_relative_to(self.boundary):
            raise RenderError(f"values file {given} leads outside the repository (symlink)", file=label)
        return in_repo


# The YAML files of a chart, besides values.yaml, that helm reads as configuration.
_CHART_FILES = ("Chart.yaml", "Chart.lock", "requirements.yaml", "requirements.lock")


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


class _Listed(Protocol):
    """What the walk needs of a directory entry (os.DirEntry, or one of a snapshot)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    def is_dir(self) -> bool: ...

    def is_file(self) -> bool: ...

    def is_symlink(self) -> bool: ...


@dataclass(frozen=True)
class _SnapshotEntry:
    name: str
    where: Path
    rel: str  # inside the snapshot
    snapshot: Snapshot

    @property
    def path(self) -> str:
        return str(self.where)

    def is_dir(self) -> bool:
        return self.rel in self.snapshot.dirs

    def is_file(self) -> bool:
        return self.rel in self.snapshot.files

    def is_symlink(self) -> bool:
        return self.rel in self.snapshot.links
