"""A directory read once (gitops_sync/render/snapshot.py): its digest is a function of what was read, a
sub-directory's snapshot is what reading it alone gives, the walker renders it exactly as it renders the
disk, and the private copy kustomize and helm read holds the same files."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from gitops_sync.errors import RenderError
from gitops_sync.render import RenderOptions, Snapshot, render
from gitops_sync.render.snapshot import read
from tests.unit.render.test_render import write

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n"
BOUNDS = {"max_bytes": 1 << 20, "max_files": 100}


def snap(root: Path) -> Snapshot:
    found = read(root, **BOUNDS)
    assert found is not None
    return found


def test_the_digest_follows_content_paths_and_kinds(tmp_path: Path) -> None:
    root = write(tmp_path / "t", {"a.yaml": CM.format(name="a"), "sub/b.yaml": CM.format(name="b")})
    first = snap(root).digest()
    assert snap(root).digest() == first
    (root / "a.yaml").write_text(CM.format(name="x"))  # same length, other bytes
    assert snap(root).digest() != first
    (root / "a.yaml").write_text(CM.format(name="a"))
    assert snap(root).digest() == first
    (root / "empty").mkdir()  # a directory is an entry too
    assert snap(root).digest() != first
    (root / "empty").rmdir()
    (root / "sub" / "b.yaml").rename(root / "b.yaml")  # same bytes elsewhere
    assert snap(root).digest() != first
    (root / "b.yaml").rename(root / "sub" / "b.yaml")
    (root / ".git").mkdir()  # .git is never part of it
    (root / ".git" / "HEAD").write_text("x")
    assert snap(root).digest() == first


def test_a_sub_directory_of_a_snapshot_is_the_snapshot_of_that_directory(tmp_path: Path) -> None:
    root = write(tmp_path / "t", {"top.yaml": "x", "apps/a.yaml": CM.format(name="a"), "apps/d/b.json": "{}"})
    (root / "apps" / "link.yaml").symlink_to("a.yaml")
    whole, alone = snap(root).sub("apps"), snap(root / "apps")
    assert whole == alone and whole is not None and whole.digest() == alone.digest()
    assert snap(root).sub("missing") is None
    assert snap(root).sub("") == snap(root)


def test_symlinks_are_recorded_as_written_and_make_it_not_plain(tmp_path: Path) -> None:
    root = write(tmp_path / "t", {"a.yaml": CM.format(name="a")})
    assert snap(root).plain
    (root / "b.yaml").symlink_to("a.yaml")
    taken = snap(root)
    assert taken.links == {"b.yaml": "a.yaml"} and "b.yaml" not in taken.files and not taken.plain
    (root / "b.yaml").unlink()
    (root / "kustomization.yaml").write_text("resources: [a.yaml]\n")
    assert not snap(root).plain


def test_a_fifo_is_named_never_opened(tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the read must not (nor render it)."""
    root = write(tmp_path / "t", {"a.yaml": CM.format(name="a")})
    os.mkfifo(root / "pipe.yaml")
    taken = snap(root)
    assert taken.others == frozenset({"pipe.yaml"}) and set(taken.files) == {"a.yaml"}
    assert [o.origin for o in render(root, snapshot=taken)] == ["a.yaml#1"]


def test_past_the_bounds_there_is_no_snapshot(tmp_path: Path) -> None:
    root = write(tmp_path / "t", {f"{n}.yaml": CM.format(name=f"c{n}") for n in range(3)})
    assert read(root, max_bytes=1 << 20, max_files=2) is None
    assert read(root, max_bytes=50, max_files=100) is None
    assert read(tmp_path / "missing", **BOUNDS) is None


def test_the_walker_renders_a_snapshot_as_it_renders_the_disk(tmp_path: Path) -> None:
    root = write(
        tmp_path / "t",
        {
            "a.yaml": CM.format(name="a") + "---\n" + CM.format(name="a2"),
            "d/b.json": '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}',
            "d/e/list.yaml": "apiVersion: v1\nkind: List\nitems:\n- " + CM.format(name="c").replace("\n", "\n  "),
            ".hidden/x.yaml": CM.format(name="hidden"),
            "README.md": "not a manifest",
            "empty.yaml": "",
        },
    )
    from_disk = render(root)
    taken = snap(root)
    for name in ("a.yaml", "d/b.json"):
        (root / name).write_text("")  # the disk is no longer read: the snapshot is
    from_snapshot = render(root, snapshot=taken)
    assert [(o.origin, o.manifest) for o in from_snapshot] == [(o.origin, o.manifest) for o in from_disk]
    assert {o.manifest["metadata"]["name"] for o in from_snapshot} == {"a", "a2", "b", "c"}


def test_a_render_error_from_a_snapshot_names_the_file(tmp_path: Path) -> None:
    root = write(tmp_path / "t", {"ok.yaml": CM.format(name="a"), "bad/x.yaml": "kind: ConfigMap\n"})
    with pytest.raises(RenderError, match=r"bad/x\.yaml#1.*missing apiVersion"):
        render(root, snapshot=snap(root))
    big = RenderOptions(max_file_bytes=10)
    with pytest.raises(RenderError, match=r"bad/x\.yaml: file is larger than the 10-byte limit"):
        render(root, big, snapshot=snap(root))


def test_only_a_plain_snapshot_renders_from_memory(tmp_path: Path) -> None:
    root = write(tmp_path / "t", {"kustomization.yaml": "resources: []\n"})
    with pytest.raises(ValueError, match="plain"):
        render(root, snapshot=snap(root))


def test_the_private_copy_holds_the_snapshot_and_reads_nothing_of_the_origin(tmp_path: Path) -> None:
    origin = write(tmp_path / "t", {"a.yaml": CM.format(name="a"), "d/b.yaml": CM.format(name="b")})
    (origin / "empty").mkdir()
    (origin / "rel.yaml").symlink_to("d/b.yaml")
    (origin / "abs.yaml").symlink_to(origin / "a.yaml")  # absolute, into the origin
    (origin / "out.yaml").symlink_to("/etc/hostname")  # absolute, elsewhere: kept as written
    taken = snap(origin)
    (origin / "a.yaml").write_text("")  # what the copy holds is what was read
    dest = tmp_path / "copy"
    taken.write(dest, origin)
    assert (dest / "a.yaml").read_text() == CM.format(name="a")
    assert (dest / "empty").is_dir() and (dest / "d" / "b.yaml").read_text() == CM.format(name="b")
    assert os.readlink(dest / "rel.yaml") == "d/b.yaml"
    assert os.readlink(dest / "abs.yaml") == str(dest / "a.yaml")
    assert os.readlink(dest / "out.yaml") == "/etc/hostname"
    assert snap(dest).files == taken.files


def test_reading_a_small_file_allocates_its_size_not_the_budget(tmp_path: Path) -> None:
    """Files read with `read(budget)` each allocated the whole 64 MB budget first (the traced peak of a
    daemon's load of the bench workload); now their size. Content and the budget check are unchanged."""
    root = write(tmp_path / "t", {f"f{i}.yaml": CM.format(name=f"n{i}") * 50 for i in range(5)})
    tracemalloc.start()
    try:
        found = read(root, max_bytes=64 << 20, max_files=100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found is not None and found.files["f0.yaml"] == (root / "f0.yaml").read_bytes()
    assert peak < 1 << 20, peak
    total = sum(len(data) for data in found.files.values())
    assert read(root, max_bytes=total, max_files=100) is not None
    assert read(root, max_bytes=total - 1, max_files=100) is None  # past the budget: not read
