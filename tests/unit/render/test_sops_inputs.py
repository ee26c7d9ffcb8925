"""The pure parts of render/sops_inputs.py: recognising sops' formats, the values a file held encrypted, the
guard keeping them in Secrets (tests/integration/secrets/test_sops_tool_inputs.py runs sops, kustomize, helm)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from gitops_sync.errors import RenderError
from gitops_sync.render import sops_inputs
from gitops_sync.render.sops_inputs import Decrypted, input_format, metadata, seal
from gitops_sync.resource import DesiredObject

DOTENV = b"""PASSWORD=ENC[AES256_GCM,data:abc,iv:x,tag:y,type:str]
USER=ENC[AES256_GCM,data:def,iv:x,tag:y,type:str]
sops_age__list_0__map_recipient=age1abc
sops_age__list_0__map_enc=-----BEGIN AGE ENCRYPTED FILE-----
sops_mac=ENC[AES256_GCM,data:m,iv:x,tag:y,type:str]
sops_version=3.13.3
"""


def test_formats_follow_the_extension_as_sops_does() -> None:
    assert [input_format(n) for n in ("a.yaml", "b.YML", "c.json", "d.env", "e.ini", "tls.key", "Makefile")] == [
        "yaml",
        "yaml",
        "json",
        "dotenv",
        "ini",
        "binary",
        "binary",
    ]


def test_metadata_of_every_format_names_its_recipients() -> None:
    docs = metadata(DOTENV, "dotenv", "db.env")
    assert docs is not None and docs[0][1]["sops"]["age"] == [
        {"recipient": "age1abc", "enc": "-----BEGIN AGE ENCRYPTED FILE-----"}
    ]
    ini = b"[db]\npassword = ENC[x]\n[sops]\npgp__list_0__map_fp = ABCD\nmac = ENC[m]\n"
    assert metadata(ini, "ini", "a.ini") == [(1, {"sops": {"pgp": [{"fp": "ABCD"}], "mac": "ENC[m]"}})]
    binary = b'{"data": "ENC[AES256_GCM,data:q]", "sops": {"mac": "ENC[m]", "age": []}}'
    assert metadata(binary, "binary", "tls.key") is not None
    assert metadata(b"PASSWORD=plain\n", "dotenv", "a.env") is None
    assert metadata(b"sops: {}\n", "yaml", "a.yaml") is None  # no mac: a plain file
    assert metadata(b"\x00\xffsops", "binary", "blob") is None  # not even JSON


def test_the_values_held_encrypted_are_known_and_kept_out_of_other_kinds() -> None:
    found = Decrypted()
    found.add(DOTENV, b"PASSWORD=hunter22\nUSER=app\n", "dotenv", "db.env")
    cipher = b"a: ENC[AES256_GCM,data:x]\nb: plain-value\nc:\n- ENC[AES256_GCM,data:y]\nsops: {mac: m}\n"
    found.add(cipher, b"a: s3cret-a\nb: plain-value\nc: [s3cret-c]\n", "yaml", "v.yaml")
    assert found.values == {"hunter22", "app", "s3cret-a", "s3cret-c"} and found.files == ["db.env", "v.yaml"]
    secret = DesiredObject({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {}}, "o")
    secret.manifest["data"]["p"] = base64.b64encode(b"hunter22").decode()
    cm = DesiredObject({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "app"}}, "o")
    seal([secret, cm], found, "app (kustomize)")  # `app`: shorter than 4 characters, not looked for
    assert secret.extra["sops"] and cm.extra["sops"]
    cm.manifest["data"]["x"] = "prefix-s3cret-a"
    with pytest.raises(RenderError, match=r"app \(kustomize\): a value decrypted from db.env, v.yaml ends up in"):
        seal([cm], found, "app (kustomize)")
    cm.manifest["data"] = {"x": base64.b64encode(b"hunter22").decode()}  # base64-encoded too
    with pytest.raises(RenderError, match="ConfigMap c"):
        seal([cm], found, "app (kustomize)")


def test_a_private_copy_keeps_relative_links_and_leaves_git_out(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / ".git").mkdir(parents=True)
    (src / "a").mkdir()
    (src / "a" / "f.yaml").write_text("x")
    (src / "link").symlink_to("a")
    with sops_inputs.private_dir() as private:
        sops_inputs.copy_tree(src, private / "copy")
        assert (private / "copy" / "link" / "f.yaml").read_text() == "x"
        assert not (private / "copy" / ".git").exists() and (private.stat().st_mode & 0o777) == 0o700
        sops_inputs.write_private(private / "copy" / "a" / "f.yaml", b"plain")
        assert (private / "copy" / "a" / "f.yaml").stat().st_mode & 0o777 == 0o600
    assert not private.exists() and (src / "a" / "f.yaml").read_text() == "x"


def test_an_input_too_large_to_read_is_passed_over_unless_it_ends_like_a_sops_file(tmp_path: Path) -> None:
    big, enc = tmp_path / "big.yaml", tmp_path / "enc.env"
    big.write_bytes(b"# " + b"x" * 4096 + b"\n")
    enc.write_bytes(b"A=ENC[" + b"x" * 4096 + b"]\nsops_mac=ENC[m]\n")
    files = {big: ("resources", "kustomization.yaml")}
    assert sops_inputs.kustomize_inputs(files, tmp_path, 1024) == []
    with pytest.raises(RenderError, match=r"enc.env: a SOPS-encrypted input larger than the 1024-byte limit"):
        sops_inputs.kustomize_inputs({enc: ("secretGenerator.envs", "kustomization.yaml")}, tmp_path, 1024)


def test_which_kustomize_inputs_are_decrypted_and_which_refused(tmp_path: Path) -> None:
    """The walk of a kustomization records every file an entry names; the encrypted ones must be resources or
    secretGenerator inputs (refused before sops runs otherwise)."""
    from gitops_sync.render import _kustomize

    (tmp_path / "db.env").write_bytes(DOTENV)
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n")
    (tmp_path / "kustomization.yaml").write_text(
        "resources:\n- cm.yaml\nsecretGenerator:\n- name: s\n  envs:\n  - db.env\n"
    )
    found = _kustomize.walk(tmp_path, tmp_path)
    assert found.files == {
        tmp_path / "cm.yaml": ("resources", "kustomization.yaml"),
        tmp_path / "db.env": ("secretGenerator.envs", "kustomization.yaml"),
    }
    inputs = sops_inputs.kustomize_inputs(found.files, tmp_path, 1 << 20)
    assert [(i.name, i.fmt, i.key) for i in inputs] == [("db.env", "dotenv", "secretGenerator.envs")]
    (tmp_path / "kustomization.yaml").write_text("configMapGenerator:\n- name: c\n  envs:\n  - db.env\n")
    with pytest.raises(RenderError, match=r"db.env: SOPS-encrypted configMapGenerator.envs input of kustomization"):
        sops_inputs.kustomize_inputs(_kustomize.walk(tmp_path, tmp_path).files, tmp_path, 1 << 20)
