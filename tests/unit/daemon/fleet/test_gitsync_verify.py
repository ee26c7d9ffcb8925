"""spec.verify of a GitSync: its shape (Flux's), the Secret of trusted keys, and the signer in its status.

The signatures themselves are checked by git on real repositories: tests/integration/test_fleet_verify.py.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gitops_sync.daemon.fleet.credentials import SigningKeys
from gitops_sync.daemon.fleet.gitsync import InvalidSpec, VerifyRef, parse
from gitops_sync.daemon.fleet.status import status_of
from gitops_sync.daemon.reconcile.outcome import SourceSnapshot
from gitops_sync.errors import CredentialsUnavailable
from tests.unit.fakes import FakeApi, fake_client, status_body

PATH = "/api/v1/namespaces/team-a/secrets/keys"


def gitsync(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": "app", "generation": 2},
        "spec": {"repository": "https://git.example/r.git", **spec},
    }


@pytest.mark.parametrize(
    ("verify", "revision", "want"),
    [
        ({"secretRef": {"name": "keys"}}, None, VerifyRef("keys", commits=True, tags=False)),
        ({"mode": "head", "secretRef": {"name": "keys"}}, None, VerifyRef("keys", commits=True, tags=False)),
        ({"mode": "Tag", "secretRef": {"name": "k"}}, "v1.0", VerifyRef("k", commits=False, tags=True)),
        ({"mode": "TagAndHEAD", "secretRef": {"name": "k"}}, "v1.0", VerifyRef("k", commits=True, tags=True)),
    ],
)
def test_spec_verify_is_read_in_fluxs_shape(verify: dict[str, Any], revision: str | None, want: VerifyRef) -> None:
    spec = {"verify": verify, **({"revision": revision} if revision else {})}
    assert parse(gitsync(**spec)).verify == want
    assert parse(gitsync()).verify is None


@pytest.mark.parametrize(
    ("verify", "problem"),
    [
        ({"mode": "HEAD"}, "spec.verify.secretRef.name is required"),
        ({"secretRef": {"name": ""}}, "spec.verify.secretRef.name is required"),
        ({"mode": "commits", "secretRef": {"name": "k"}}, "must be HEAD, Tag or TagAndHEAD"),
        ({"mode": "Tag", "secretRef": {"name": "k"}}, "needs spec.revision naming the signed tag"),
    ],
)
def test_an_unusable_spec_verify_is_invalid_naming_the_field(verify: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidSpec, match=problem) as err:
        parse(gitsync(verify=verify))
    assert "GitSync team-a/app" in str(err.value)


def keys_of(data: dict[str, bytes], *, tags: bool = False) -> SigningKeys:
    encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
    api = FakeApi().on("GET", PATH, {"apiVersion": "v1", "kind": "Secret", "data": encoded})
    user = "system:serviceaccount:team-a:deployer"
    return SigningKeys(fake_client(api), "team-a", "keys", user, commits=True, tags=tags)


def test_the_secret_gives_every_asc_key_and_the_allowed_signers() -> None:
    keys = keys_of({"b.asc": b"B", "a.asc": b"A", "allowed_signers": b"alice ssh-ed25519 AAAA", "other": b"x"})()
    assert keys.pgp_public_keys == (b"A", b"B") and keys.allowed_signers == b"alice ssh-ed25519 AAAA"
    assert keys.commits and not keys.tags
    assert keys_of({"a.asc": b"A"}, tags=True)().tags


def test_a_secret_without_keys_or_not_readable_is_refused_naming_it() -> None:
    with pytest.raises(CredentialsUnavailable, match=r"Secret team-a/keys \(spec.verify.secretRef\) holds no"):
        keys_of({"readme": b"x"})()
    api = FakeApi().on("GET", PATH, (403, status_body(403, "Forbidden", "secrets is forbidden")))
    reader = SigningKeys(fake_client(api), "team-a", "keys", "system:serviceaccount:team-a:t", commits=True, tags=False)
    with pytest.raises(CredentialsUnavailable, match="ServiceAccount team-a/t may not get it"):
        reader()


def test_the_signer_of_the_revision_held_is_in_the_status() -> None:
    gs = parse(gitsync(verify={"secretRef": {"name": "keys"}}))
    snap = SourceSnapshot(revision="abc", loaded=True, applied=("abc", "x"), first_sync=True, signer="alice (SSH key)")
    assert status_of(gs, snap)["signedBy"] == "alice (SSH key)"
    assert "signedBy" not in status_of(gs, SourceSnapshot(revision="abc", loaded=True))
