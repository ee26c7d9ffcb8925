"""spec.chartCredentials: what the GitSync model accepts, and what `ChartSecrets` makes of each Secret (Flux's keys,
a refusal naming the Secret and never a value, an entry that never allows a repository).

Reading the Secrets as a tenant's ServiceAccount against the real API server, and the real registries taking the
credentials, is tests/integration/charts/test_chart_credentials_fleet.py; here the API server's answers are canned.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.chart_credentials import ChartSecrets, registry_host
from gitops_sync.errors import CredentialsUnavailable
from gitops_sync.render import charts
from tests.unit.fakes import FakeApi, fake_client

USER = "system:serviceaccount:team-a:deployer"


def _secret(data: dict[str, str]) -> dict[str, Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "data": encoded}


def _reader(secrets: dict[str, dict[str, str]], entries: tuple[tuple[str, str], ...]) -> tuple[ChartSecrets, FakeApi]:
    api = FakeApi()
    for name, data in secrets.items():
        api.on("GET", f"/api/v1/namespaces/team-a/secrets/{name}", (200, _secret(data)))
    return ChartSecrets(fake_client(api), "team-a", entries, USER), api


def _gs(spec: dict[str, Any]) -> gitsync.GitSync:
    return gitsync.parse(
        {"metadata": {"namespace": "team-a", "name": "web"}, "spec": {"repository": "https://g/x", **spec}}
    )


def test_the_spec_maps_url_prefixes_to_secrets_of_its_own_namespace() -> None:
    gs = _gs(
        {
            "chartCredentials": [
                {"url": "https://charts.example/team/", "secretRef": {"name": "charts"}},
                {"url": "oci://registry.example/charts", "secretRef": {"name": "registry"}},
            ]
        }
    )
    assert gs.chart_credentials == (
        ("https://charts.example/team", "charts"),
        ("oci://registry.example/charts", "registry"),
    )
    assert _gs({}).chart_credentials == ()


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ({"url": "https://x"}, "must be a list"),
        ([{"url": "https://x", "secretRef": {}}], "needs a url and secretRef.name"),
        ([{"url": "ftp://x", "secretRef": {"name": "s"}}], "must be an https:// or oci:// URL prefix"),
        ([{"url": "https://u:p@x", "secretRef": {"name": "s"}}], "without credentials"),
        ([{"url": "https://x?token=1", "secretRef": {"name": "s"}}], "without credentials or query"),
    ],
)
def test_a_bad_entry_is_an_invalid_spec_naming_the_field(entries: Any, problem: str) -> None:
    with pytest.raises(gitsync.InvalidSpec, match=problem) as err:
        _gs({"chartCredentials": entries})
    assert "GitSync team-a/web" in str(err.value) and "u:p" not in str(err.value)


def test_each_secret_is_read_once_as_the_serviceaccount_and_becomes_a_tenant_entry() -> None:
    reader, api = _reader(
        {"charts": {"username": "deploy\n", "password": "s3cret\n", "ca.crt": "PEM\n"}, "ca": {"ca.crt": "CA\n"}},
        (("https://charts.example", "charts"), ("oci://registry.example", "charts"), ("https://other", "ca")),
    )
    got = reader()
    assert [(a.url, a.username, a.password, a.ca_data) for a in got] == [
        ("https://charts.example", "deploy", "s3cret", "PEM\n"),
        ("oci://registry.example", "deploy", "s3cret", "PEM\n"),
        ("https://other", None, None, "CA\n"),
    ]
    assert [c.path.rsplit("/", 1)[-1] for c in api.calls] == ["charts", "ca"]  # a Secret named twice: read once
    assert all(a.origin.startswith("Secret team-a/") and not a.allows for a in got)
    assert "s3cret" not in repr(got) and "PEM" not in repr(got)
    # The next pass reads them again: a rotated password is used without a restart.
    api.on("GET", "/api/v1/namespaces/team-a/secrets/charts", (200, _secret({"username": "d", "password": "new"})))
    assert reader()[0].password == "new"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({}, "holds none of the keys username, password, ca.crt, .dockerconfigjson"),
        ({"password": "s3cret"}, "one of username and password without the other"),
        ({"username": "deploy"}, "one of username and password without the other"),
    ],
)
def test_an_unusable_secret_is_refused_naming_it_never_a_value(data: dict[str, str], problem: str) -> None:
    reader, _ = _reader({"charts": data}, (("https://charts.example", "charts"),))
    with pytest.raises(CredentialsUnavailable, match=problem) as err:
        reader()
    assert "Secret team-a/charts (spec.chartCredentials[0])" in str(err.value)
    assert "s3cret" not in str(err.value) and err.value.reason == "CredentialsUnavailable"


def test_a_missing_or_forbidden_secret_is_credentials_unavailable() -> None:
    reader, api = _reader({}, (("https://charts.example", "gone"),))
    with pytest.raises(CredentialsUnavailable, match=r"gone \(spec.chartCredentials\[0\]\) not found"):
        reader()
    api.on("GET", "/api/v1/namespaces/team-a/secrets/gone", (403, {"kind": "Status", "code": 403}))
    with pytest.raises(CredentialsUnavailable, match="ServiceAccount team-a/deployer may not get it"):
        reader()


def test_a_tenant_entry_never_allows_a_repository_the_operator_did_not() -> None:
    tenant = charts.RepositoryAccess(url="https://evil.example", username="u", password="p", allows=False)
    assert not charts.access_for("https://evil.example/x", [tenant]).allowed
    got = charts.access_for("https://evil.example/x", [tenant], ("https://evil.example",))
    assert got.allowed and got.password == "p"
    operator = charts.RepositoryAccess(url="https://charts.example")
    assert charts.access_for("https://charts.example/stable", [operator]).allowed


def test_tenant_entries_come_after_the_file_and_without_it(tmp_path: Any) -> None:
    tenant = charts.RepositoryAccess(url="https://t", allows=False)
    assert charts.load_access(None, env=False, extra=(tenant,)) == [tenant]
    creds = tmp_path / "c.yaml"
    creds.write_text("repositories:\n  - url: https://o\n")
    assert [e.url for e in charts.load_access(creds, extra=(tenant,))] == ["https://o", "https://t"]


def _docker(auths: dict[str, Any]) -> dict[str, str]:
    return {".dockerconfigjson": json.dumps({"auths": auths})}


def _basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("key", "host"),
    [
        ("registry.example", "registry.example"),
        ("Registry.Example:5000", "registry.example:5000"),
        ("https://registry.example/v1/", "registry.example"),
        ("http://registry.example:5000", "registry.example:5000"),
        ("registry.example/team", "registry.example"),
        ("oci://registry.example:5000/charts", "registry.example:5000"),
        ("https://charts.example/team", "charts.example"),
    ],
)
def test_a_registry_host_is_host_and_port_of_a_docker_config_key_or_a_url(key: str, host: str) -> None:
    assert registry_host(key) == host


def test_an_image_pull_secret_gives_the_login_of_the_entry_for_the_url_s_host() -> None:
    auths = {
        "registry.example": {"auth": _basic("no-port", "wrong")},  # another host: the port is part of it
        "https://registry.example:5000/v1/": {"auth": _basic("deploy", "s3:cret")},  # a password may hold ':'
        "other.example": {"username": "other", "password": "pw-other"},
    }
    reader, api = _reader(
        {"pull": {**_docker(auths), "ca.crt": "PEM\n"}},
        (("oci://registry.example:5000/charts", "pull"), ("oci://other.example", "pull")),
    )
    got = reader()
    assert [(a.url, a.username, a.password, a.ca_data) for a in got] == [
        ("oci://registry.example:5000/charts", "deploy", "s3:cret", "PEM\n"),
        ("oci://other.example", "other", "pw-other", "PEM\n"),
    ]
    assert len(api.calls) == 1 and all(a.origin == "Secret team-a/pull" and not a.allows for a in got)
    assert "s3:cret" not in repr(got) and "pw-other" not in repr(got)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            _docker({"a.example": {"auth": _basic("u", "s3cret")}}),
            r"has no entry for registry\.example \(it has: a\.example\)",
        ),
        (
            _docker({"registry.example": {"identitytoken": "s3cret"}}),
            "entry for registry.example holds no username and password",
        ),
        (
            _docker({"registry.example": {"auth": "s3cret"}}),
            "entry for registry.example holds no username and password",
        ),
        ({".dockerconfigjson": "s3cret"}, "is not a JSON object with `auths`"),
        ({".dockerconfigjson": '["s3cret"]'}, "is not a JSON object with `auths`"),
        ({**_docker({"registry.example": {"auth": _basic("u", "p")}}), "password": "s3cret"}, "holds both"),
    ],
)
def test_an_unusable_image_pull_secret_is_refused_naming_it_never_a_value(data: dict[str, str], problem: str) -> None:
    reader, _ = _reader({"pull": data}, (("oci://registry.example/charts", "pull"),))
    with pytest.raises(CredentialsUnavailable, match=problem) as err:
        reader()
    assert str(err.value).startswith("Secret team-a/pull (spec.chartCredentials[0])")
    assert "s3cret" not in str(err.value) and err.value.reason == "CredentialsUnavailable"
