"""`render` of SOPS-encrypted files with the real `sops` (and `kubectl kustomize`), no API server: what is
decrypted, what is refused, and what the render cache keeps on disk (nothing, for such a source)."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from secret_tools import MARKS, SecretTools, secret_tools_fixture  # noqa: F401  (the fixture `secret_tools`)

from gitops_sync.errors import RenderError
from gitops_sync.render import RenderOptions, render
from gitops_sync.render.sops import Decryption
from gitops_sync.rendercache import DiskStore, MemoryStore, RenderCache
from gitops_sync.source import Checkout

pytestmark = MARKS  # needs the built binaries (sops, kubectl), as tests/integration/test_render_tools


def options(tools: SecretTools, key: Path) -> RenderOptions:
    age = tuple(ln for ln in key.read_text().splitlines() if ln.startswith("AGE-SECRET-KEY-"))
    return RenderOptions(
        kubectl=str(tools.bin_dir / "kubectl"), decryption=Decryption(age, sops=str(tools.bin_dir / "sops"))
    )


def encrypted(tools: SecretTools, root: Path, name: str, text: str, recipient: str) -> None:
    plain = tools.work / f"plain-{uuid.uuid4().hex}"
    plain.write_text(text)
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    args = ["sops", "encrypt", "--input-type", "json" if name.endswith(".json") else "yaml"]
    args += ["--output-type", "json" if name.endswith(".json") else "yaml", "--age", recipient, str(plain)]
    (root / name).write_bytes(tools.run(*args))
    plain.unlink()


SECRET = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\nstringData:\n  token: {value}\n"


def test_yaml_and_json_files_decrypt_in_memory_and_are_marked(tmp_path: Path, secret_tools: SecretTools) -> None:
    key, recipient = secret_tools.age_key("render")
    value = f"v-{uuid.uuid4().hex}"
    encrypted(secret_tools, tmp_path, "a.yaml", SECRET.format(name="a", value=value), recipient)
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "b"},
        "data": {"k": base64.b64encode(b"x").decode()},
    }
    encrypted(secret_tools, tmp_path, "b.json", json.dumps(doc), recipient)
    (tmp_path / "c.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n")
    objs = {o.key.name: o for o in render(tmp_path, options(secret_tools, key))}
    assert objs["a"].manifest["stringData"] == {"token": value}
    assert "sops" not in objs["a"].manifest
    assert objs["b"].manifest["data"] == doc["data"]
    assert objs["a"].extra.get("sops") and objs["b"].extra.get("sops") and not objs["c"].extra.get("sops")


def test_only_secrets_may_be_encrypted(tmp_path: Path, secret_tools: SecretTools) -> None:
    key, recipient = secret_tools.age_key("kinds")
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  k: hidden-value\n"
    encrypted(secret_tools, tmp_path, "cm.yaml", cm, recipient)
    with pytest.raises(RenderError, match=r"cm.yaml#1: a SOPS-encrypted file may hold only Secrets") as err:
        render(tmp_path, options(secret_tools, key))
    assert "hidden-value" not in str(err.value)


def test_render_cache_stores_nothing_for_a_decrypted_source(tmp_path: Path, secret_tools: SecretTools) -> None:
    """The plain source is stored (the cache works here), the one with a decrypted Secret is not."""
    key, recipient = secret_tools.age_key("cache")
    value = f"v-{uuid.uuid4().hex}"
    plain, secret = tmp_path / "plain", tmp_path / "secret"
    plain.mkdir()
    secret.mkdir()
    (plain / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n")
    encrypted(secret_tools, secret, "s.yaml", SECRET.format(name="s", value=value), recipient)
    store = tmp_path / "renders"
    cache = RenderCache(DiskStore(store))
    opts = options(secret_tools, key)
    cache.render(Checkout(plain, "", str(plain), ""), opts, render)
    assert len(list(store.glob("*.json"))) == 1
    for _ in range(2):
        objs = cache.render(Checkout(secret, "", str(secret), ""), opts, render)
        assert objs[0].manifest["stringData"] == {"token": value}
    assert len(list(store.glob("*.json"))) == 1 and cache.hits == 0
    for path in store.iterdir():
        assert value.encode() not in path.read_bytes()


def test_the_daemons_memory_store_keeps_a_decrypted_render(tmp_path: Path, secret_tools: SecretTools) -> None:
    """Memory only: a re-poll of the same files is served without running sops again."""
    key, recipient = secret_tools.age_key("memory")
    encrypted(secret_tools, tmp_path, "s.yaml", SECRET.format(name="s", value="v"), recipient)
    cache = RenderCache(MemoryStore())
    first = cache.render(Checkout(tmp_path, "", str(tmp_path), ""), options(secret_tools, key), render)
    keys = options(secret_tools, key).decryption
    gone = replace(options(secret_tools, key), decryption=replace(keys, sops=str(tmp_path / "no-sops")))
    again = cache.render(Checkout(tmp_path, "", str(tmp_path), ""), gone, render)
    assert cache.hits == 1 and again[0].manifest == first[0].manifest
    other, _ = secret_tools.age_key("other")  # other keys (a GitSync's Secret rotated): rendered anew, and refused
    with pytest.raises(RenderError, match="no given key fits"):
        cache.render(Checkout(tmp_path, "", str(tmp_path), ""), options(secret_tools, other), render)
