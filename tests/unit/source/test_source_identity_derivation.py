"""gitops_sync.source.identity: one identity per source however it is spelled, never one for two sources.

Every collision to tell apart (two repositories called `deploy`, `.` vs `./`, two hosts, `deploy`+`apps/web`
vs `deploy-apps`+`web`, long names cut at 63) and the spellings of one source (a clone vs its remote URL).
"""

from __future__ import annotations

import re
from pathlib import Path

import git
import pytest

from gitops_sync.cluster.lease import lease_name
from gitops_sync.source.identity import (
    MAX_NAME,
    SourceIdentity,
    identify,
    label_identities,
    legacy_inventory_name,
    normalize_url,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def name(repo: str, path: str | None = None) -> str:
    return identify(repo, path).inventory_name()


@pytest.mark.parametrize(
    "spelling",
    [
        "https://github.com/org-a/deploy",
        "https://github.com/org-a/deploy.git",
        "https://github.com/org-a/deploy/",
        "https://github.com/org-a/deploy.git/",
        "https://user:s3cret@github.com/org-a/deploy.git",
        "https://GitHub.com:443/org-a//deploy",
        "http://github.com/org-a/deploy",
        "ssh://git@github.com/org-a/deploy.git",
        "ssh://git@github.com:22/org-a/deploy",
        "git@github.com:org-a/deploy.git",
        "git@github.com:/org-a/deploy",
        "git://github.com/org-a/deploy",
    ],
)
def test_every_spelling_of_one_url_is_one_source(spelling: str) -> None:
    assert normalize_url(spelling) == "github.com/org-a/deploy"
    assert identify(spelling, "apps") == SourceIdentity("github.com/org-a/deploy", "apps")


def test_credentials_never_reach_the_identity() -> None:
    ident = identify("https://ci-bot:ghp_T0KEN@git.example/org/deploy.git", None)
    assert "T0KEN" not in ident.text and "ci-bot" not in ident.text and "T0KEN" not in ident.inventory_name()


def test_two_teams_with_repositories_both_called_deploy_get_two_inventories() -> None:
    a, b = name("https://github.com/org-a/deploy", "apps"), name("https://github.com/org-b/deploy", "apps")
    assert a != b
    # the old naming gave both the same name: the bug
    assert legacy_inventory_name("https://github.com/org-a/deploy", "apps") == legacy_inventory_name(
        "https://github.com/org-b/deploy", "apps"
    )


def test_two_hosts_and_two_orgs_are_two_sources() -> None:
    names = {
        name("https://github.com/org-a/deploy"),
        name("git@gitlab.com:org-b/deploy"),
        name("https://gitlab.com/org-a/deploy"),
        name("ssh://git@github.com:2222/org-a/deploy"),  # another port can be another server
    }
    assert len(names) == 4
    # the literal spellings (no scheme, no user: local paths to Git and to us) differ as well
    assert name("github.com/org-a/deploy") != name("gitlab.com:org-b/deploy")
    assert legacy_inventory_name("github.com/org-a/deploy", None) == legacy_inventory_name(
        "gitlab.com:org-b/deploy", None
    )


def test_repository_and_path_boundaries_do_not_collide() -> None:
    names = {
        name("https://git.example/x/deploy", "apps/web"),
        name("https://git.example/x/deploy-apps", "web"),
        name("https://git.example/x/deploy/apps", "web"),
        name("https://git.example/x/deploy-apps-web"),
    }
    assert len(names) == 4


def test_long_names_that_share_the_first_63_characters_do_not_collide() -> None:
    base = "https://git.example/platform/" + "very-long-repository-name-" * 4
    a, b = name(base + "one", "clusters/prod"), name(base + "two", "clusters/prod")
    assert a != b
    assert legacy_inventory_name(base + "one", "clusters/prod") == legacy_inventory_name(base + "two", "clusters/prod")
    for n in (a, b, name("/x/" + "a" * 300, "b/" * 100 + "c")):
        assert len(n) <= MAX_NAME <= 63 and DNS_LABEL.match(n), n


def test_name_is_readable_and_stable() -> None:
    n = name("https://git.example/Org/My_App.git", "./overlays/prod/")
    assert n.startswith("gitops-sync-org-my-app-overlays-prod-") and DNS_LABEL.match(n)
    assert n == name("git@git.example:Org/My_App", "overlays/prod")  # same source, same name, every time
    assert identify("https://h/o/r", "./a//b/") == identify("https://h/o/r", "a/b")
    assert identify("https://h/o/r", ".") == identify("https://h/o/r", None) == identify("https://h/o/r", "")


def test_path_case_is_kept_host_case_is_not() -> None:
    assert normalize_url("https://HOST.example/Org/Repo") == "host.example/Org/Repo"
    assert name("https://h.example/Org/Repo") != name("https://h.example/org/repo")


def test_dot_and_dot_slash_and_absolute_path_are_one_plain_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "deploy" / "apps").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "deploy")
    ids = {identify(".", "apps"), identify("./", "apps"), identify(str(tmp_path / "deploy"), "apps/")}
    ids.add(identify(str(tmp_path / "deploy" / "apps"), None))  # --repo deploy/apps is --repo deploy --path apps
    assert ids == {SourceIdentity(str((tmp_path / "deploy" / "apps").resolve()), "")}


def test_two_local_directories_called_deploy_are_two_sources(tmp_path: Path) -> None:
    for team in ("team-a", "team-b"):
        (tmp_path / team / "deploy" / "apps").mkdir(parents=True)
    assert name(str(tmp_path / "team-a" / "deploy"), "apps") != name(str(tmp_path / "team-b" / "deploy"), "apps")


def test_a_clone_is_its_remote_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = git.Repo.init(tmp_path / "remote.git", bare=True, initial_branch="main")
    work = git.Repo.init(tmp_path / "clone", initial_branch="main")
    work.create_remote("origin", str(bare.git_dir))
    (tmp_path / "clone" / "clusters" / "prod").mkdir(parents=True)
    url_id = identify(f"file://{bare.git_dir}", "clusters/prod")
    assert url_id == identify(str(bare.git_dir), "clusters/prod")  # `--repo /srv/remote.git` (bare, no remote)
    monkeypatch.chdir(tmp_path / "clone")
    assert identify(".", "clusters/prod") == url_id
    assert identify("./clusters", "prod") == url_id  # --repo inside the work tree
    assert identify(str(tmp_path / "clone" / "clusters" / "prod"), None) == url_id


def test_a_clone_of_a_hosted_repository_is_its_url(tmp_path: Path) -> None:
    work = git.Repo.init(tmp_path / "clone", initial_branch="main")
    work.create_remote("origin", "git@github.com:org-a/deploy.git")
    work.create_remote("fork", "git@github.com:someone/deploy.git")
    assert identify(str(tmp_path / "clone"), "apps") == identify("https://github.com/org-a/deploy", "apps")


def test_without_origin_the_only_remote_counts_and_several_remotes_mean_the_path(tmp_path: Path) -> None:
    work = git.Repo.init(tmp_path / "clone", initial_branch="main")
    work.create_remote("upstream", "https://git.example/org/deploy")
    assert identify(str(tmp_path / "clone"), None).repo == "git.example/org/deploy"
    work.create_remote("fork", "https://git.example/me/deploy")
    assert identify(str(tmp_path / "clone"), None).repo == str((tmp_path / "clone").resolve())


def test_a_local_repository_without_remote_is_its_top_directory(tmp_path: Path) -> None:
    git.Repo.init(tmp_path / "deploy", initial_branch="main")
    (tmp_path / "deploy" / "apps").mkdir()
    top = str((tmp_path / "deploy").resolve())
    assert identify(str(tmp_path / "deploy" / "apps"), None) == SourceIdentity(top, "apps")
    assert identify(str(tmp_path / "deploy"), "apps") == SourceIdentity(top, "apps")


def test_a_source_that_does_not_exist_yet_still_has_an_identity(tmp_path: Path) -> None:
    ident = identify(str(tmp_path / "missing"), "apps")
    assert ident.repo == str((tmp_path / "missing" / "apps").resolve())


def test_recorded_labels_of_earlier_versions_resolve_when_they_can() -> None:
    ours = identify("https://github.com/org-a/deploy", "apps")
    assert ours in label_identities("https://***@github.com/org-a/deploy.git//apps@main")
    assert ours in label_identities("git@github.com:org-a/deploy//apps")
    assert ours not in label_identities("https://github.com/org-b/deploy//apps")
    assert ours not in label_identities("https://github.com/org-a/deploy//apps/web")
    assert label_identities(".//apps") == set()  # relative: nobody knows to what


def test_lease_names_follow_the_inventory() -> None:
    a, b = name("https://github.com/org-a/deploy", "apps"), name("https://github.com/org-b/deploy", "apps")
    assert lease_name(a, "ns", "ns") == f"{a}-lease" and lease_name(a, "ns", "ns") != lease_name(b, "ns", "ns")
    # one namespace holding the Leases of inventories in two namespaces: still two Leases
    assert lease_name("app", "team-a", "gitops") != lease_name("app", "team-b", "gitops")
    long_a, long_b = "x" * 100 + "a", "x" * 100 + "b"
    assert lease_name(long_a) != lease_name(long_b)
    for n in (lease_name(long_a), lease_name("app", "team-a", "gitops"), lease_name(a, "ns", "ns")):
        assert len(n) <= 63 and DNS_LABEL.match(n), n
