"""The render cache (gitops_sync/rendercache.py): a re-sync of the same commit skips render, anything that
can change the output misses, a corrupt entry is ignored and rewritten,
a work tree or plain directory is keyed by its files' content.
Real Git repositories; `render` is counted (and, for charts and kustomizations, stood in for: the key is
what is under test, not the tools)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gitops_sync import engine, rendercache
from gitops_sync.engine import SourceOptions, load, loading
from gitops_sync.render import RenderOptions
from gitops_sync.rendercache import DiskStore, MemoryStore, RenderCache
from gitops_sync.resource import DesiredObject

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make_repo(tmp_path: Path, files: dict[str, str]) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, files)
    return repo


def commit(repo: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "c")


class Counting:
    """loading.render, counted; `fake` stands in for the tools (kustomize, helm) the unit tests do not run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fake: bool = False) -> None:
        self.calls = 0
        real = loading.render

        def counted(root: Path, opts: RenderOptions, **kw: Any) -> list[DesiredObject]:
            self.calls += 1
            if fake:
                return [DesiredObject({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, "fake")]
            return real(root, opts, **kw)

        monkeypatch.setattr(loading, "render", counted)


def source(repo: Path, tmp_path: Path, **kw: Any) -> SourceOptions:
    return SourceOptions(repo=str(repo), revision=kw.pop("revision", "main"), cache_dir=tmp_path / "cache", **kw)


def test_a_second_render_of_the_same_commit_is_served_from_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path, {"a.yaml": CM.format(name="a"), "b.yaml": CM.format(name="b")})
    counting = Counting(monkeypatch)
    src = source(repo, tmp_path)
    _, first = load(src, engine.disk_render_cache(src))
    _, second = load(src, engine.disk_render_cache(src))  # a new process would build a new cache object too
    assert counting.calls == 1
    assert [(o.origin, o.manifest) for o in second] == [(o.origin, o.manifest) for o in first]
    second[0].manifest["data"]["k"] = "changed"  # the caller's copy: the next hit is unaffected
    _, third = load(src, engine.disk_render_cache(src))
    assert third[0].manifest["data"]["k"] == "v" and counting.calls == 1
    commit(repo, {"a.yaml": CM.format(name="a2")})  # a new commit changing the rendered tree: a miss
    _, fourth = load(src, engine.disk_render_cache(src))
    assert counting.calls == 2 and {o.manifest["metadata"]["name"] for o in fourth} == {"a2", "b"}


def test_a_commit_outside_the_rendered_path_keeps_the_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path, {"apps/a.yaml": CM.format(name="a"), "docs/README": "x"})
    counting = Counting(monkeypatch)
    src = source(repo, tmp_path, path="apps")
    load(src, engine.disk_render_cache(src))
    commit(repo, {"docs/README": "y"})
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 1


def test_a_changed_values_file_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path, {"chart/Chart.yaml": "name: c\nversion: 0.1.0\n", "chart/values.yaml": "a: 1\n"})
    values = tmp_path / "prod.yaml"
    values.write_text("replicas: 1\n")
    counting = Counting(monkeypatch, fake=True)
    monkeypatch.setattr(rendercache, "_version", lambda argv: "v1")
    src = source(repo, tmp_path, render=RenderOptions(helm_values=(values,)))
    load(src, engine.disk_render_cache(src))
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 1
    values.write_text("replicas: 2\n")
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 2


def test_a_new_tool_version_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path, {"kustomization.yaml": "resources: [cm.yaml]\n", "cm.yaml": CM.format(name="a")})
    counting = Counting(monkeypatch, fake=True)
    version = {"now": "kubectl v1.37"}
    monkeypatch.setattr(rendercache, "_version", lambda argv: version["now"])
    src = source(repo, tmp_path)
    load(src, engine.disk_render_cache(src))
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 1
    version["now"] = "kubectl v1.38"
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 2


def test_a_corrupt_entry_is_ignored_and_rewritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path, {"a.yaml": CM.format(name="a")})
    counting = Counting(monkeypatch)
    src = source(repo, tmp_path)
    load(src, engine.disk_render_cache(src))
    [entry] = (tmp_path / "cache" / "renders").glob("*.json")
    assert entry.stat().st_mode & 0o077 == 0  # rendered Secrets: readable by this user only
    good = entry.read_bytes()
    entry.write_bytes(good.replace(b'"name":"a"', b'"name":"z"'))  # same length, digest no longer matches
    _, objects = load(src, engine.disk_render_cache(src))
    assert counting.calls == 2 and objects[0].manifest["metadata"]["name"] == "a"
    assert entry.read_bytes() == good  # rewritten whole
    entry.write_bytes(b"garbage")
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 3 and entry.read_bytes() == good
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 3


def test_a_work_tree_is_cached_by_its_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A work tree (clean or dirty) has no commit that decides it: its files' content does."""
    repo = make_repo(tmp_path, {"a.yaml": CM.format(name="a")})
    counting = Counting(monkeypatch)
    src = source(repo, tmp_path, revision=None)  # the work tree itself, clean
    load(src, engine.disk_render_cache(src))
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 1
    (repo / "a.yaml").write_text(CM.format(name="dirty"))
    _, objects = load(src, engine.disk_render_cache(src))
    assert counting.calls == 2 and objects[0].manifest["metadata"]["name"] == "dirty"
    (repo / "a.yaml").write_text(CM.format(name="a"))  # back to the committed content: its entry again
    _, objects = load(src, engine.disk_render_cache(src))
    assert counting.calls == 2 and objects[0].manifest["metadata"]["name"] == "a"
    (repo / "new.yaml").write_text(CM.format(name="new"))  # an untracked file is rendered: it counts
    _, objects = load(src, engine.disk_render_cache(src))
    assert counting.calls == 3 and sorted(o.manifest["metadata"]["name"] for o in objects) == ["a", "new"]


def test_a_plain_directory_change_of_the_same_size_and_time_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key digests content, not mtimes: a rewrite within the same second and size is a miss."""
    plain = tmp_path / "plain"
    plain.mkdir()
    file = plain / "a.yaml"
    file.write_text(CM.format(name="aaaa"))
    counting = Counting(monkeypatch)
    src = source(plain, tmp_path, revision=None)
    load(src, engine.disk_render_cache(src))
    stat = file.stat()
    file.write_text(CM.format(name="bbbb"))
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    _, objects = load(src, engine.disk_render_cache(src))
    assert counting.calls == 2 and objects[0].manifest["metadata"]["name"] == "bbbb"
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 2


@pytest.mark.parametrize("outside", ["kustomization", "symlink"])
def test_a_directory_that_reads_outside_its_path_keys_on_the_whole_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outside: str
) -> None:
    """--path apps of a plain directory: a kustomization (bases in ../base) or a symlink may read the rest of
    the top directory, so a change there is a miss too; without either, it is not."""
    top = tmp_path / "top"
    (top / "apps").mkdir(parents=True)
    (top / "base").mkdir()
    (top / "base" / "cm.yaml").write_text(CM.format(name="base"))
    if outside == "kustomization":
        (top / "apps" / "kustomization.yaml").write_text("resources: [../base]\n")
    else:
        (top / "apps" / "cm.yaml").symlink_to(top / "base" / "cm.yaml")
    counting = Counting(monkeypatch, fake=True)
    src = source(top, tmp_path, revision=None, path="apps")
    load(src, engine.disk_render_cache(src))
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 1
    (top / "base" / "cm.yaml").write_text(CM.format(name="changed"))
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 2
    (top / "unrelated.txt").write_text("x")  # anywhere under the top: the whole top is the key
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 3


def test_a_directory_of_plain_manifests_ignores_the_rest_of_the_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = tmp_path / "top"
    (top / "apps").mkdir(parents=True)
    (top / "apps" / "cm.yaml").write_text(CM.format(name="a"))
    counting = Counting(monkeypatch)
    src = source(top, tmp_path, revision=None, path="apps")
    load(src, engine.disk_render_cache(src))
    (top / "README.md").write_text("not rendered")
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 1


def test_a_directory_past_the_digest_bounds_is_rendered_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for n in range(3):
        (plain / f"{n}.yaml").write_text(CM.format(name=f"c{n}"))
    monkeypatch.setattr(rendercache, "_DIGEST_MAX_FILES", 2)
    counting = Counting(monkeypatch)
    src = source(plain, tmp_path, revision=None)
    load(src, engine.disk_render_cache(src))
    load(src, engine.disk_render_cache(src))
    assert counting.calls == 2
    assert not (tmp_path / "cache" / "renders").exists()


def test_the_disk_store_keeps_the_most_recent_entries(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "renders", max_entries=2)
    for n in range(4):
        store.put(f"k{n}", [DesiredObject({"n": n}, "o")])
    assert sorted(p.name for p in (tmp_path / "renders").glob("*.json")) == ["k2.json", "k3.json"]
    assert store.get("k0") is None and store.get("k3") is not None


def test_objects_json_cannot_give_back_are_not_cached() -> None:
    store = MemoryStore()
    store.put("k", [DesiredObject({"data": {1: "int key"}}, "o")])
    assert store.get("k") is None


def test_the_daemon_memory_store_serves_a_second_render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path, {"a.yaml": CM.format(name="a")})
    counting = Counting(monkeypatch)
    cache = RenderCache(MemoryStore())
    src = source(repo, tmp_path)
    load(src, cache)
    load(src, cache)
    assert counting.calls == 1 and (cache.hits, cache.misses) == (1, 1)


def test_the_memory_store_renders_anew_when_a_gitsyncs_keys_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec.decryption's Secret is read before every render (SourceOptions.decryption): a rotated or removed
    key must not be served a render decrypted with the old one (the disk store never holds one anyway)."""
    from gitops_sync.render.sops import Decryption

    repo = make_repo(tmp_path, {"a.yaml": CM.format(name="a")})
    counting = Counting(monkeypatch)
    cache = RenderCache(MemoryStore(max_entries=8))
    keys = [Decryption(age=("AGE-SECRET-KEY-1A",))]
    src = source(repo, tmp_path, decryption=lambda: keys[0])
    load(src, cache)
    load(src, cache)
    assert counting.calls == 1  # the same keys: served
    keys[0] = Decryption(age=("AGE-SECRET-KEY-1B",))
    load(src, cache)
    assert counting.calls == 2  # rotated: rendered again
    disk = engine.disk_render_cache(src)
    load(src, disk)
    keys[0] = Decryption(age=("AGE-SECRET-KEY-1C",))
    load(src, disk)  # on disk (the CLI's), the keys are not in the key: nothing that decrypted is stored
    assert counting.calls == 3
    assert not any("AGE-SECRET" in p.read_text() for p in (tmp_path / "cache").rglob("*.json"))


def test_chart_credentials_are_read_each_pass_reach_the_render_and_never_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GitSync's spec.chartCredentials are asked for once per load (a rotated Secret is read again) and reach
    the render as chart_access; the key leaves them out (a rotation is no miss, no password is hashed into it)."""
    from gitops_sync.render.charts import RepositoryAccess

    repo = make_repo(tmp_path, {"a.yaml": CM.format(name="a")})
    seen: list[tuple[RepositoryAccess, ...]] = []
    real = loading.render

    def render(root: Path, opts: RenderOptions, **kw: Any) -> list[DesiredObject]:
        seen.append(opts.chart_access)
        return real(root, opts, **kw)

    monkeypatch.setattr(loading, "render", render)
    passwords = iter(["first-pw", "rotated-pw"])
    asked: list[str] = []

    def secrets() -> tuple[RepositoryAccess, ...]:
        asked.append(password := next(passwords))
        return (RepositoryAccess(url="https://charts.example", username="u", password=password, allows=False),)

    src = source(repo, tmp_path, chart_credentials=secrets)
    cache = RenderCache(MemoryStore())
    load(src, cache)
    load(src, cache)
    assert asked == ["first-pw", "rotated-pw"]  # once per pass
    assert [a.password for a in seen[0]] == ["first-pw"] and len(seen) == 1  # the second load: a cache hit
    assert cache.hits == 1
