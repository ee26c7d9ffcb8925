"""What `DecryptionKeys` makes of a GitSync's spec.decryption Secret: Flux's key names, a refusal naming the
Secret with reason DecryptionFailed, never a value.

Reading it as a tenant's ServiceAccount against the real API server, with the real `sops` (rotation, 403, a
wrong key) is in tests/integration/secrets/test_fleet_secrets.py; here the answers are canned.
"""

from __future__ import annotations

import base64

import pytest

from gitops_sync.daemon.fleet.keys import DecryptionKeys
from gitops_sync.errors import DecryptionFailed
from tests.unit.fakes import FakeApi, fake_client, status_body

PATH = "/api/v1/namespaces/team-a/secrets/sops-keys"
IDENTITY = "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQSJ8VZP"
ARMORED = b"-----BEGIN PGP PRIVATE KEY BLOCK-----\nxyz\n-----END PGP PRIVATE KEY BLOCK-----\n"


def read(data: dict[str, bytes] | None, *, status: int = 200) -> DecryptionKeys:
    encoded = {k: base64.b64encode(v).decode() for k, v in (data or {}).items()}
    api = FakeApi()
    if status == 200:
        api.on("GET", PATH, {"apiVersion": "v1", "kind": "Secret", "data": encoded})
    else:
        api.on("GET", PATH, (status, status_body(status, "Forbidden" if status == 403 else "NotFound")))
    return DecryptionKeys(fake_client(api), "team-a", "sops-keys", "system:serviceaccount:team-a:deployer")


def test_fluxs_key_names_are_read() -> None:
    keys = read({"team.agekey": f"# public key: age1x\n{IDENTITY}\n".encode(), "ops.asc": ARMORED, "x.txt": b"no"})()
    assert keys.age == (IDENTITY,) and keys.pgp == (ARMORED,)
    assert keys.origin == "Secret team-a/sops-keys (spec.decryption.secretRef)"
    assert IDENTITY not in repr(keys) and "xyz" not in repr(keys)


def test_no_secret_ref_means_no_keys_and_no_request() -> None:
    api = FakeApi()
    assert not DecryptionKeys(fake_client(api), "team-a", "", "")()
    assert not api.calls


@pytest.mark.parametrize(
    ("data", "status", "problem"),
    [
        ({}, 200, "holds no key: name entries \\*.agekey"),
        ({"team.agekey": b"not a key"}, 200, "key team.agekey holds no age identity"),
        (None, 404, "not found"),
        (None, 403, "ServiceAccount team-a/deployer may not get it \\(403 Forbidden\\)"),
    ],
)
def test_an_unusable_secret_is_refused_naming_it_never_a_value(
    data: dict[str, bytes] | None, status: int, problem: str
) -> None:
    with pytest.raises(DecryptionFailed, match=problem) as err:
        read(data, status=status)()
    assert "Secret team-a/sops-keys (spec.decryption.secretRef)" in str(err.value)
    assert "not a key" not in str(err.value) and err.value.reason == "DecryptionFailed"
