"""SOPS in the render before any `sops` runs: recognising a file, the keys as values, and the errors that
name the file and who it was encrypted for without quoting a value (tests/integration/secrets runs sops)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_sync.errors import RenderError
from gitops_sync.render import RenderOptions, render
from gitops_sync.render.sops import Decryption, from_cli

IDENTITY = "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQSJ8VZP"
RECIPIENT = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"
ENCRYPTED = f"""apiVersion: v1
kind: Secret
metadata:
  name: db
stringData:
  password: ENC[AES256_GCM,data:gnAxFCG++QLDQbNKeBo6GIVhOQ==,iv:Vr,tag:Hq,type:str]
sops:
  age:
  - recipient: {RECIPIENT}
    enc: x
  pgp:
  - fp: 0123456789ABCDEF0123456789ABCDEF01234567
    enc: y
  mac: ENC[AES256_GCM,data:iZ,iv:rj,tag:Kq,type:str]
  lastmodified: "2026-12-05T07:23:52Z"
  version: 3.13.3
"""


def test_an_encrypted_file_without_keys_names_the_file_and_its_recipients(tmp_path: Path) -> None:
    (tmp_path / "secret.yaml").write_text(ENCRYPTED)
    with pytest.raises(RenderError) as err:
        render(tmp_path, RenderOptions())
    text = str(err.value)
    assert text.startswith("secret.yaml: SOPS-encrypted")
    assert RECIPIENT in text and "OpenPGP 0123456789ABCDEF0123456789ABCDEF01234567" in text
    assert "SOPS_AGE_KEY_FILE" in text and "gnAxFCG" not in text


def test_a_plain_file_with_a_sops_field_but_no_mac_is_a_manifest(tmp_path: Path) -> None:
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\nsops: {}\n")
    assert [o.key.name for o in render(tmp_path, RenderOptions())] == ["c"]


def test_a_missing_sops_binary_says_how_to_build_it(tmp_path: Path) -> None:
    (tmp_path / "secret.yaml").write_text(ENCRYPTED)
    opts = RenderOptions(decryption=Decryption(age=(IDENTITY,), sops=str(tmp_path / "no-sops")))
    with pytest.raises(RenderError, match=r"secret.yaml: .*not found.*cluster.py build --with sops"):
        render(tmp_path, opts)


def test_keys_come_from_flags_then_the_environment_and_are_never_shown(tmp_path: Path) -> None:
    flag, env_file = tmp_path / "flag.txt", tmp_path / "env.txt"
    flag.write_text(f"# created: now\n# public key: {RECIPIENT}\n{IDENTITY}\n")
    env_file.write_text(IDENTITY.replace("QQQQ", "PPPP", 1) + "\n")
    inline = IDENTITY.replace("QQQQ", "RRRR", 1)
    both = from_cli([flag], [], {"SOPS_AGE_KEY_FILE": str(env_file), "SOPS_AGE_KEY": inline})
    assert both.age == (IDENTITY, inline)  # a flag replaces SOPS_AGE_KEY_FILE; SOPS_AGE_KEY adds
    assert from_cli([], [], {"SOPS_AGE_KEY_FILE": str(env_file)}).age == (IDENTITY.replace("QQQQ", "PPPP", 1),)
    assert not from_cli([], [], {})
    assert IDENTITY not in repr(both) and IDENTITY not in repr(RenderOptions(decryption=both))
    (tmp_path / "public.txt").write_text(RECIPIENT + "\n")
    with pytest.raises(RenderError, match="holds no age identity") as err:
        from_cli([tmp_path / "public.txt"], [], {})
    assert RECIPIENT not in str(err.value)
    with pytest.raises(RenderError, match="cannot read the OpenPGP private key file"):
        from_cli([], [tmp_path / "missing.asc"], {})


def test_ciphertext_in_a_tools_secret_is_refused_and_plain_values_pass() -> None:
    """A SOPS env file's values through a secretGenerator: base64 (folded, as kustomize writes it) of ENC[…]."""
    import base64

    from gitops_sync.render.sops import refuse_in_tool_output

    enc = base64.b64encode(b"ENC[AES256_GCM,data:fUw=,iv:eD,tag:30,type:str]").decode()
    folded = enc[:20] + "\n" + enc[20:] + "\n"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}}
    with pytest.raises(RenderError, match="app \\(kustomize\\)#1: SOPS-encrypted manifest or values"):
        refuse_in_tool_output({**secret, "data": {"PASSWORD": folded}}, "app (kustomize)#1")
    with pytest.raises(RenderError):
        refuse_in_tool_output({**secret, "stringData": {"k": "ENC[AES256_GCM,data:x,iv:y,tag:z,type:str]"}}, "w")
    refuse_in_tool_output({**secret, "data": {"k": base64.b64encode(b"plain").decode()}, "stringData": None}, "w")
    refuse_in_tool_output({"kind": "ConfigMap", "data": {"k": "ENC[AES256_GCM,data:x]"}}, "w")  # only Secrets


def test_a_file_for_cloud_kms_or_vault_keys_only_is_refused_before_sops_runs(tmp_path: Path) -> None:
    """sops would contact the Vault address written in the file (or a cloud KMS); `sops` is not even run
    (the binary given does not exist)."""
    vault = ENCRYPTED.split("sops:\n")[0] + (
        "sops:\n  hc_vault:\n  - vault_address: https://vault.attacker.example\n    engine_path: t\n"
        "    key_name: k\n    enc: x\n  key_groups:\n  - kms:\n    - arn: arn:aws:kms:eu-west-1:1:key/x\n      enc: y\n"
        "  mac: ENC[AES256_GCM,data:iZ,iv:rj,tag:Kq,type:str]\n  version: 3.13.3\n"
    )
    (tmp_path / "secret.yaml").write_text(vault)
    opts = RenderOptions(decryption=Decryption(age=(IDENTITY,), sops=str(tmp_path / "no-sops")))
    with pytest.raises(RenderError, match=r"secret.yaml: SOPS file encrypted only for hc_vault, kms keys"):
        render(tmp_path, opts)
    # With an age recipient too, sops runs (here: the missing binary is what fails).
    (tmp_path / "secret.yaml").write_text(
        vault.replace("  hc_vault:", f"  age:\n  - recipient: {RECIPIENT}\n    enc: z\n  hc_vault:")
    )
    with pytest.raises(RenderError, match="not found"):
        render(tmp_path, opts)


def test_keys_from_a_secrets_data_in_fluxs_layout() -> None:
    """What a GitSync's spec.decryption.secretRef holds: `*.agekey` and `*.asc` entries, in memory."""
    from gitops_sync.render.sops import from_secret
    from gitops_sync.source.verify import from_secret as trusted_from_secret

    data = {"team.agekey": f"# public key: {RECIPIENT}\n{IDENTITY}\n".encode(), "ops.asc": b"-----BEGIN PGP", "x": b"y"}
    keys = from_secret(data, "Secret team-a/sops-keys")
    assert keys.age == (IDENTITY,) and keys.pgp == (b"-----BEGIN PGP",)
    assert IDENTITY not in repr(keys)
    with pytest.raises(RenderError, match=r"Secret team-a/sops-keys, key bad\.agekey holds no age identity"):
        from_secret({"bad.agekey": RECIPIENT.encode()}, "Secret team-a/sops-keys")
    with pytest.raises(RenderError, match=r"Secret team-a/sops-keys holds no key"):
        from_secret({"x": b"y"}, "Secret team-a/sops-keys")
    assert keys.fingerprint() != from_secret({"a.agekey": IDENTITY[:-1].encode() + b"Q"}, "s").fingerprint()
    trusted = trusted_from_secret({"allowed_signers": b"a@b ssh-ed25519 AAAA", "k.asc": b"pub"}, tags=True)
    assert trusted.allowed_signers == b"a@b ssh-ed25519 AAAA" and trusted.pgp_public_keys == (b"pub",)
    assert trusted.tags and trusted.commits and not trusted_from_secret({})
