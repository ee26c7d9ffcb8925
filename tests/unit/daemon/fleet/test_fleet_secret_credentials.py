"""What `SecretCredentials` makes of a Secret's data: Flux's keys, a refusal naming the Secret, no value.

Reading it as a tenant's ServiceAccount against the real API server (403, not found, rotation) is in
tests/integration/test_private_repositories_fleet.py; here the answers are canned.
"""

from __future__ import annotations

import base64

import pytest

from gitops_sync.daemon.fleet.credentials import SecretCredentials
from gitops_sync.errors import CredentialsUnavailable
from tests.unit.fakes import FakeApi, fake_client

PATH = "/api/v1/namespaces/team-a/secrets/git"


def read(data: dict[str, str | bytes]) -> SecretCredentials:
    """A reader whose API server answers a Secret holding `data` (text, or bytes as they are)."""
    raw = {k: v.encode() if isinstance(v, str) else v for k, v in data.items()}
    encoded = {k: base64.b64encode(v).decode() for k, v in raw.items()}
    api = FakeApi().on("GET", PATH, {"apiVersion": "v1", "kind": "Secret", "data": encoded})
    return SecretCredentials(fake_client(api), "team-a", "git", "system:serviceaccount:team-a:deployer")


def test_fluxs_keys_are_read_and_the_credentials_are_a_tenants() -> None:
    creds = read({"username": "deploy\n", "password": "s3cret\n", "ca.crt": "PEM\n", "other": "x"})()
    assert (creds.username, creds.password, creds.ca_cert) == ("deploy", "s3cret", "PEM\n")  # a stray newline
    assert creds.isolated and creds.origin == "Secret team-a/git (spec.secretRef)"
    ssh = read({"identity": "KEY\n", "known_hosts": "h k\n"})()
    assert (ssh.identity, ssh.known_hosts) == ("KEY\n", "h k\n")
    assert read({"bearerToken": "tok"})().bearer_token == "tok"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({}, "holds none of the keys"),
        ({"password": "s3cret"}, "a password needs a username"),
        ({"identity": "KEY"}, "needs known_hosts"),
        ({"password": b"s3cret\xff"}, "key password is not UTF-8 text"),
    ],
)
def test_an_unusable_secret_is_refused_naming_it_never_a_value(data: dict[str, str | bytes], problem: str) -> None:
    with pytest.raises(CredentialsUnavailable, match=problem) as err:
        read(data)()
    assert "Secret team-a/git" in str(err.value) and "s3cret" not in str(err.value)
    assert err.value.reason == "CredentialsUnavailable"
