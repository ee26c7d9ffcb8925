"""A local repository's own `.git/config` (and what it includes) and `.gitattributes` make gitops-sync run
nothing: no fsmonitor, no smudge or clean filter, no hook. Real git; each configured command would write a
marker file, and the render must show the blob's content, not a filter's (safegit.py, treewrite.py,
worktree.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import git
import pytest

from gitops_sync.engine import SourceOptions, load
from gitops_sync.source import fetch
from tests.unit.source.test_source import commit

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"
HOOKS = ("post-checkout", "post-index-change", "reference-transaction", "pre-commit", "post-merge", "pre-auto-gc")


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def hostile(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """A committed repository whose configuration (set afterwards, as an attacker would) names commands that
    each leave a marker in the returned directory; `app/cm.yaml` holds the ConfigMap `blob`."""
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = git.Repo.init(tmp_path / "work", initial_branch="main")
    top = Path(repo.working_tree_dir or "")
    commit(repo, {"app/cm.yaml": CM.format(name="blob"), ".gitattributes": "*.yaml filter=evil\n"})
    mark = _script(tmp_path / "mark", f'touch "{markers}/$1"\ncat >/dev/null 2>&1 || true\nexit 1\n')
    smudged = CM.format(name="smudged")
    smudge = _script(tmp_path / "smudge", f'touch "{markers}/$1"\ncat >/dev/null\nprintf "{smudged}"\n')
    clean = _script(tmp_path / "clean", f'touch "{markers}/$1"\ncat\n')
    config = {
        "fsmonitor": f"[core]\n\tfsmonitor = {mark} fsmonitor\n",
        "filter": f'[filter "evil"]\n\tsmudge = {smudge} smudge\n\tclean = {clean} clean\n\trequired = true\n',
        "hooks": f"[core]\n\thooksPath = {tmp_path / 'hooks'}\n",
        "include": f"[include]\n\tpath = {tmp_path / 'included.config'}\n",
    }
    (tmp_path / "hooks").mkdir()
    for hook in HOOKS:
        _script(tmp_path / "hooks" / hook, f'touch "{markers}/{hook}"\n')
    # The included file names every command at once: an include is followed like the file itself.
    (tmp_path / "included.config").write_text("".join(v for k, v in config.items() if k != "include"))
    with (top / ".git" / "config").open("a") as f:
        f.write(config[how])
    # A changed modification time: git must look at the file again (fsmonitor, the clean filter).
    os.utime(top / "app" / "cm.yaml", (1, 1))
    return top, markers


HOW = ("fsmonitor", "filter", "hooks", "include")


def names(source: SourceOptions) -> tuple[str, set[str]]:
    checkout, objects = load(source)
    return checkout.revision, {o.manifest["metadata"]["name"] for o in objects}


@pytest.mark.parametrize("how", HOW)
def test_a_work_tree_runs_nothing_its_configuration_names(tmp_path: Path, how: str) -> None:
    top, markers = hostile(tmp_path, how)
    revision, found = names(SourceOptions(repo=str(top), cache_dir=tmp_path / "cache"))
    assert sorted(os.listdir(markers)) == []
    assert found == {"blob"}
    assert len(revision) == 40  # the same bytes as the commit: not dirty


@pytest.mark.parametrize("how", HOW)
def test_a_revision_of_a_local_repository_is_written_from_its_blobs(tmp_path: Path, how: str) -> None:
    top, markers = hostile(tmp_path, how)
    revision, found = names(SourceOptions(repo=str(top), revision="main", cache_dir=tmp_path / "cache"))
    assert sorted(os.listdir(markers)) == []
    assert found == {"blob"}
    assert (tmp_path / "cache").is_dir() and len(revision) == 40


@pytest.mark.parametrize("revision", [[], ["--revision", "main"]], ids=["work-tree", "revision"])
def test_the_cli_render_runs_nothing_a_local_repository_configures(tmp_path: Path, revision: list[str]) -> None:
    top, markers = hostile(tmp_path, "include")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    argv = [sys.executable, "-m", "gitops_sync", "render", "--repo", str(top), *revision]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "name: blob" in done.stdout and "smudged" not in done.stdout
    assert sorted(os.listdir(markers)) == []


def test_a_work_tree_changed_is_still_dirty(tmp_path: Path) -> None:
    """Raw hashes tell every kind of change git status would: edited, staged, untracked, deleted, mode."""
    repo = git.Repo.init(tmp_path / "work", initial_branch="main")
    top = Path(repo.working_tree_dir or "")
    commit(repo, {"app/cm.yaml": CM.format(name="a"), "app/run.sh": "x\n", "other/x.yaml": CM.format(name="x")})
    (top / "app" / "run.sh").chmod(0o755)
    commit(repo, {}, "exec")
    (top / ".gitignore").write_text("*.tmp\n")
    commit(repo, {}, "ignore")

    def dirty(path: str | None = None) -> bool:
        return fetch(str(top), path=path, cache_dir=tmp_path / "cache").revision.endswith("-dirty")

    assert not dirty()
    (top / "app" / "junk.tmp").write_text("ignored\n")
    assert not dirty()
    changes = [
        lambda: (top / "app" / "cm.yaml").write_text(CM.format(name="b")),
        lambda: (top / "app" / "new.yaml").write_text("x: 1\n"),
        lambda: (top / "app" / "cm.yaml").unlink(),
        lambda: (top / "app" / "run.sh").chmod(0o644),
        lambda: (top / "app" / "cm.yaml").symlink_to("run.sh") if (top / "app" / "cm.yaml").unlink() is None else None,
    ]
    for change in changes:
        change()
        assert dirty() and dirty("app") and not dirty("other")
        repo.git.checkout("--", ".")
        (top / "app" / "new.yaml").unlink(missing_ok=True)
        assert not dirty()
    (top / "other" / "x.yaml").write_text(CM.format(name="y"))
    repo.git.add("--all")
    (top / "other" / "x.yaml").write_text(CM.format(name="x"))  # staged, then undone in the work tree
    assert dirty("other") and not dirty("app")


def test_a_checked_out_submodule_runs_nothing_its_own_configuration_names(tmp_path: Path) -> None:
    """`git status` recursing into a submodule would honour the submodule's own config (.git/modules/…)."""
    from tests.unit.source.test_submodules import superproject

    work, _ = superproject(tmp_path)
    top = Path(work.working_tree_dir or "")
    markers = tmp_path / "markers"
    markers.mkdir()
    mark = _script(tmp_path / "mark", f'touch "{markers}/$1"\nexit 1\n')
    clean = _script(tmp_path / "clean", f'touch "{markers}/$1"\ncat\n')
    sub_git = Path(git.Repo(top / "vendor" / "lib").git_dir)
    with (sub_git / "config").open("a") as f:
        f.write(f'[core]\n\tfsmonitor = {mark} fsmonitor\n[filter "evil"]\n\tclean = {clean} clean\n')
    (sub_git / "info").mkdir(exist_ok=True)
    (sub_git / "info" / "attributes").write_text("* filter=evil\n")
    os.utime(top / "vendor" / "lib" / "cm.yaml", (1, 1))
    revision, found = names(SourceOptions(repo=str(top), cache_dir=tmp_path / "cache"))
    assert sorted(os.listdir(markers)) == []
    assert found == {"top", "app", "from-sub"} and len(revision) == 40
    (top / "vendor" / "lib" / "cm.yaml").write_text(CM.format(name="changed"))
    assert fetch(str(top), cache_dir=tmp_path / "cache").revision.endswith("-dirty")
    assert sorted(os.listdir(markers)) == []


@pytest.mark.parametrize("program", ["gpg.program", "gpg.ssh.program"])
def test_verifying_a_local_commit_runs_no_program_its_configuration_names(tmp_path: Path, program: str) -> None:
    """A commit carrying a signature makes `git show %G?`/`verify-commit` run the gpg program: the repository's
    own `gpg.program` is not it."""
    from gitops_sync.errors import SourceError
    from gitops_sync.source.verify import TrustedKeys, verify_commit

    repo = git.Repo.init(tmp_path / "work", initial_branch="main")
    commit(repo, {"cm.yaml": CM.format(name="blob")})
    top = Path(repo.working_tree_dir or "")
    head = repo.head.commit
    kind = "SSH" if "ssh" in program else "PGP"
    sig = f"-----BEGIN {kind} SIGNATURE-----\n AAAA\n -----END {kind} SIGNATURE-----"
    raw = (
        f"tree {head.tree.hexsha}\nauthor t <t@t> 1 +0000\ncommitter t <t@t> 1 +0000\ngpgsig {sig}\n\nsigned\n"
    ).encode()
    done = subprocess.run(
        ["git", "hash-object", "-w", "-t", "commit", "--stdin"], cwd=top, input=raw, capture_output=True, check=True
    )
    signed = done.stdout.decode().strip()
    markers = tmp_path / "markers"
    markers.mkdir()
    evil = _script(tmp_path / "evil", f'touch "{markers}/gpg"\nexit 1\n')
    with (top / ".git" / "config").open("a") as f:
        f.write(f'[gpg]\n\tprogram = {evil}\n[gpg "ssh"]\n\tprogram = {evil}\n')
    keys = TrustedKeys(allowed_signers=b"t@t ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG\n", timeout=30)
    with pytest.raises(SourceError):
        verify_commit(Path(repo.git_dir), signed, keys)
    assert sorted(os.listdir(markers)) == []
