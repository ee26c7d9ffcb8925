"""gitops_sync.source: local trees, plain directories and file:// remotes built with GitPython in tmp_path."""

from __future__ import annotations

import threading
from pathlib import Path

import git
import pytest

from gitops_sync.errors import SourceError
from gitops_sync.source import Checkout, fetch, mask_url
from gitops_sync.source.checkout import is_remote

ACTOR = git.Actor("Test", "test@example.invalid")


def commit(repo: git.Repo, files: dict[str, str], message: str = "change") -> str:
    """Write files into the work tree, stage everything and commit; returns the SHA."""
    top = Path(repo.working_tree_dir or "")
    for name, text in files.items():
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(text)
    repo.git.add("--all")
    return repo.index.commit(message, author=ACTOR, committer=ACTOR).hexsha


@pytest.fixture
def work(tmp_path: Path) -> git.Repo:
    repo = git.Repo.init(tmp_path / "work", initial_branch="main")
    commit(repo, {"app/cm.yaml": "kind: ConfigMap\n", "README.md": "hi\n"}, "first")
    return repo


@pytest.fixture
def remote(tmp_path: Path, work: git.Repo) -> tuple[str, git.Repo]:
    """A bare repository reachable as file://, with `main` pushed from `work`, and `work` as pusher."""
    bare = git.Repo.init(tmp_path / "remote.git", bare=True, initial_branch="main")
    work.create_remote("origin", str(bare.git_dir))
    work.git.push("origin", "main")
    return f"file://{bare.git_dir}", work


def read(checkout: Checkout, name: str) -> str:
    return (checkout.root / name).read_text()


# --- local paths -------------------------------------------------------------------------------------


def test_plain_directory_has_empty_revision(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.yaml").write_text("x: 1\n")
    out = fetch(str(tmp_path / "plain"), cache_dir=tmp_path / "cache")
    assert out == Checkout(
        (tmp_path / "plain").resolve(), "", str(tmp_path / "plain"), "", (tmp_path / "plain").resolve()
    )


def test_plain_directory_with_revision_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"revision 'main'.*no Git repository"):
        fetch(str(tmp_path), "main", cache_dir=tmp_path / "cache")


def test_missing_local_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"nowhere: no such file or directory"):
        fetch(str(tmp_path / "nowhere"))


def test_clean_work_tree_is_rendered_in_place_with_head_sha(work: git.Repo, tmp_path: Path) -> None:
    top = Path(work.working_tree_dir or "")
    out = fetch(str(top), cache_dir=tmp_path / "cache")
    assert out.root == top.resolve()
    assert out.revision == work.head.commit.hexsha
    assert len(out.revision) == 40
    assert out.ref == ""


@pytest.mark.parametrize("change", ["modify", "untracked", "staged"])
def test_dirty_work_tree_gets_dirty_suffix(work: git.Repo, tmp_path: Path, change: str) -> None:
    top = Path(work.working_tree_dir or "")
    if change == "modify":
        (top / "app" / "cm.yaml").write_text("kind: Secret\n")
    elif change == "untracked":
        (top / "app" / "new.yaml").write_text("kind: Pod\n")
    else:
        (top / "app" / "staged.yaml").write_text("kind: Pod\n")
        work.index.add(["app/staged.yaml"])
    out = fetch(str(top), cache_dir=tmp_path / "cache")
    assert out.revision == work.head.commit.hexsha + "-dirty"
    assert out.root == top.resolve()  # rendered as it is, uncommitted changes included


def test_dirty_only_counts_what_is_rendered(work: git.Repo, tmp_path: Path) -> None:
    """A change elsewhere in the repository does not make the rendered sub-directory dirty."""
    top = Path(work.working_tree_dir or "")
    (top / "README.md").write_text("changed\n")
    assert fetch(str(top / "app"), cache_dir=tmp_path / "cache").revision == work.head.commit.hexsha
    assert fetch(str(top), "", "app", cache_dir=tmp_path / "cache").revision == work.head.commit.hexsha
    assert fetch(str(top), cache_dir=tmp_path / "cache").revision.endswith("-dirty")


def test_local_revision_is_materialised_aside_from_the_work_tree(work: git.Repo, tmp_path: Path) -> None:
    top = Path(work.working_tree_dir or "")
    first = work.head.commit.hexsha
    commit(work, {"app/cm.yaml": "kind: Secret\n"}, "second")
    (top / "app" / "cm.yaml").write_text("uncommitted\n")
    status_before = work.git.status("--porcelain")

    out = fetch(str(top), first[:8], cache_dir=tmp_path / "cache")

    assert out.revision == first
    assert out.ref == first[:8]
    assert out.root.is_relative_to(tmp_path / "cache")
    assert read(out, "app/cm.yaml") == "kind: ConfigMap\n"
    assert (top / "app" / "cm.yaml").read_text() == "uncommitted\n"
    assert work.git.status("--porcelain") == status_before
    assert work.head.commit.message == "second"


def test_local_branch_revision_of_a_sub_directory(work: git.Repo, tmp_path: Path) -> None:
    top = Path(work.working_tree_dir or "")
    out = fetch(str(top / "app"), "main", cache_dir=tmp_path / "cache")
    assert out.root.name == "app"
    assert read(out, "cm.yaml") == "kind: ConfigMap\n"
    assert out.repo_root == out.root


def test_local_unknown_revision_names_it_and_the_repo(work: git.Repo, tmp_path: Path) -> None:
    top = Path(work.working_tree_dir or "")
    with pytest.raises(SourceError, match=rf"unknown revision 'nope' in {top}"):
        fetch(str(top), "nope", cache_dir=tmp_path / "cache")


def test_option_like_revision_is_rejected(work: git.Repo, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="invalid revision"):
        fetch(str(work.working_tree_dir), "--output=/tmp/x", cache_dir=tmp_path / "cache")


# --- --path ------------------------------------------------------------------------------------------


def test_path_selects_a_sub_directory(work: git.Repo, tmp_path: Path) -> None:
    top = Path(work.working_tree_dir or "")
    out = fetch(str(top), path="app", cache_dir=tmp_path / "cache")
    assert out.root == (top / "app").resolve()
    assert out.repo_root == top.resolve()


@pytest.mark.parametrize("bad", ["..", "../work", "app/../..", "/etc"])
def test_path_escaping_the_repository_is_rejected(work: git.Repo, tmp_path: Path, bad: str) -> None:
    with pytest.raises(SourceError, match=r"--path .*(outside the repository|must be relative)"):
        fetch(str(work.working_tree_dir), path=bad, cache_dir=tmp_path / "cache")


def test_path_through_a_symlink_out_of_the_repository_is_rejected(work: git.Repo, tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (Path(work.working_tree_dir or "") / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(SourceError, match="outside the repository"):
        fetch(str(work.working_tree_dir), path="link", cache_dir=tmp_path / "cache")


def test_missing_path_is_an_error(work: git.Repo, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"--path 'nope' does not exist"):
        fetch(str(work.working_tree_dir), path="nope", cache_dir=tmp_path / "cache")


# --- remotes -----------------------------------------------------------------------------------------


def test_remote_default_revision_is_remote_head(remote: tuple[str, git.Repo], tmp_path: Path) -> None:
    url, work = remote
    out = fetch(url, cache_dir=tmp_path / "cache")
    assert out.revision == work.head.commit.hexsha
    assert out.repo == url and out.ref == ""
    assert read(out, "app/cm.yaml") == "kind: ConfigMap\n"
    assert not (out.root / ".git").exists()
    assert out.root.is_relative_to(tmp_path / "cache")


def test_remote_branch_tag_and_short_sha(remote: tuple[str, git.Repo], tmp_path: Path) -> None:
    url, work = remote
    first = work.head.commit.hexsha
    work.create_tag("v1.0", message="release")  # annotated: must be peeled to the commit
    work.git.checkout("-b", "feature")
    second = commit(work, {"app/cm.yaml": "kind: Secret\n"}, "feature work")
    work.git.push("origin", "feature", "v1.0")

    by_branch = fetch(url, "feature", cache_dir=tmp_path / "cache")
    by_tag = fetch(url, "v1.0", cache_dir=tmp_path / "cache")
    by_short = fetch(url, second[:7], cache_dir=tmp_path / "cache")
    by_full = fetch(url, first, cache_dir=tmp_path / "cache")

    assert (by_branch.revision, read(by_branch, "app/cm.yaml")) == (second, "kind: Secret\n")
    assert (by_tag.revision, read(by_tag, "app/cm.yaml")) == (first, "kind: ConfigMap\n")
    assert by_short.revision == second and by_short.ref == second[:7]
    assert by_full.revision == first
    assert by_branch.root == by_short.root  # one directory per commit, reused


def test_remote_unknown_revision_is_named(remote: tuple[str, git.Repo], tmp_path: Path) -> None:
    url, _ = remote
    with pytest.raises(SourceError, match=rf"unknown revision 'no-such-branch' in {url}"):
        fetch(url, "no-such-branch", cache_dir=tmp_path / "cache")


def test_force_pushed_branch_is_followed(remote: tuple[str, git.Repo], tmp_path: Path) -> None:
    url, work = remote
    before = fetch(url, "main", cache_dir=tmp_path / "cache")
    work.git.reset("--hard", "HEAD")
    work.git.commit("--amend", "-m", "rewritten", f"--author={ACTOR.name} <{ACTOR.email}>")
    commit(work, {"app/cm.yaml": "kind: Rewritten\n"}, "after rewrite")
    work.git.push("--force", "origin", "main")

    after = fetch(url, "main", cache_dir=tmp_path / "cache")

    assert after.revision == work.head.commit.hexsha != before.revision
    assert read(after, "app/cm.yaml") == "kind: Rewritten\n"
    assert read(before, "app/cm.yaml") == "kind: ConfigMap\n"  # a reader of the old tree is undisturbed


def test_remote_with_path(remote: tuple[str, git.Repo], tmp_path: Path) -> None:
    url, _ = remote
    out = fetch(url, path="app", cache_dir=tmp_path / "cache")
    assert out.root.name == "app" and read(out, "cm.yaml") == "kind: ConfigMap\n"
    assert out.repo_root == out.root.parent
    with pytest.raises(SourceError, match="outside the repository"):
        fetch(url, path="app/../../..", cache_dir=tmp_path / "cache")


def test_unreachable_remote_names_the_host(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"cannot reach 127\.0\.0\.1"):
        fetch("https://127.0.0.1:9/org/repo.git", cache_dir=tmp_path / "cache", timeout=20)


def test_missing_file_remote_is_named(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/absent.git"
    with pytest.raises(SourceError, match=rf"no Git repository at {url}"):
        fetch(url, cache_dir=tmp_path / "cache")


def test_credentials_are_never_shown(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        fetch("https://alice:s3cret-token@127.0.0.1:9/repo.git", cache_dir=tmp_path / "cache", timeout=20)
    assert "s3cret-token" not in str(err.value)
    assert "alice" not in str(err.value)
    assert "https://***@127.0.0.1:9/repo.git" in str(err.value)
    assert not any("s3cret" in p.name for p in (tmp_path / "cache").rglob("*"))


def test_concurrent_fetches_of_one_remote_agree(remote: tuple[str, git.Repo], tmp_path: Path) -> None:
    url, work = remote
    results: list[Checkout | BaseException] = []

    def run() -> None:
        try:
            results.append(fetch(url, "main", cache_dir=tmp_path / "cache"))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(r, Checkout) and r.revision == work.head.commit.hexsha for r in results), results


def test_old_checkouts_are_pruned(remote: tuple[str, git.Repo], tmp_path: Path) -> None:
    url, work = remote
    roots = []
    for i in range(10):
        commit(work, {"n.yaml": f"n: {i}\n"})
        work.git.push("origin", "main")
        roots.append(fetch(url, cache_dir=tmp_path / "cache").root)
    assert roots[-1].is_dir()
    assert not roots[0].exists()
    assert len([p for p in roots[-1].parent.iterdir() if not p.name.startswith(".")]) <= 8


# --- helpers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("https://user:pw@host/x.git", "https://***@host/x.git"),
        ("https://token@host/x.git", "https://***@host/x.git"),
        ("git@github.com:org/x.git", "git@github.com:org/x.git"),
        ("see https://a:b@h/x and ssh://u:p@h2/y", "see https://***@h/x and ssh://***@h2/y"),
    ],
)
def test_mask_url(text: str, masked: str) -> None:
    assert mask_url(text) == masked


@pytest.mark.parametrize(
    ("repo", "remote"),
    [
        ("https://h/x.git", True),
        ("ssh://git@h/x.git", True),
        ("git@h:org/x.git", True),
        ("file:///srv/x.git", True),
        ("./examples-repo", False),
        ("/abs/dir", False),
        ("C:dir", False),
    ],
)
def test_is_remote(repo: str, remote: bool) -> None:
    assert is_remote(repo) is remote


def test_auth_failure_is_reported_as_such(tmp_path: Path) -> None:
    """An HTTP remote answering 401 fails at once (no prompt) with an authentication message."""
    import http.server

    class Deny(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Deny)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://bob:wrong@127.0.0.1:{server.server_address[1]}/repo.git"
        with pytest.raises(SourceError, match=r"authentication failed for http://\*\*\*@127\.0\.0\.1") as err:
            fetch(url, cache_dir=tmp_path / "cache", timeout=20)
        assert "wrong" not in str(err.value)
    finally:
        server.shutdown()


def test_commit_only_reachable_by_sha(remote: tuple[str, git.Repo], tmp_path: Path) -> None:
    """A full SHA that no branch or tag points at any more is still fetched when the server allows it."""
    url, work = remote
    work.git.checkout("-b", "tmp")
    sha = commit(work, {"x.yaml": "x: 1\n"})
    work.git.push("origin", "tmp")
    work.git.push("origin", "--delete", "tmp")
    out = fetch(url, sha, cache_dir=tmp_path / "cache")
    assert out.revision == sha and read(out, "x.yaml") == "x: 1\n"
