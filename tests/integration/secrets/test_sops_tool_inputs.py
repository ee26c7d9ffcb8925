"""SOPS-encrypted inputs of kustomize and helm with the real `sops`, `kubectl kustomize` and `helm`, no API
server: a kustomization's encrypted resources and secretGenerator files/envs (dotenv, binary, YAML), a chart's
own encrypted values.yaml. Decrypted into a private copy that is gone once the render returns; a decrypted value
in anything but a Secret is refused; an encrypted input that is not decrypted is refused, never applied."""

from __future__ import annotations

import base64
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from secret_tools import MARKS, SecretTools, secret_tools_fixture  # noqa: F401  (the fixture `secret_tools`)
from test_sops_render import SECRET, encrypted, options

from gitops_sync.errors import RenderError
from gitops_sync.render import RenderOptions, render, sops, sops_inputs
from gitops_sync.resource import DesiredObject

pytestmark = MARKS


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temporary directory the render makes its private copies in: empty again after each render."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    yield tmp


def sops_file(tools: SecretTools, target: Path, text: str | bytes, fmt: str, recipient: str, *regex: str) -> None:
    plain = tools.work / f"plain-{uuid.uuid4().hex}"
    plain.write_bytes(text.encode() if isinstance(text, str) else text)
    target.parent.mkdir(parents=True, exist_ok=True)
    args = ["sops", "encrypt", "--input-type", fmt, "--output-type", fmt, "--age", recipient, *regex, str(plain)]
    target.write_bytes(tools.run(*args))
    plain.unlink()


def by_name(objects: list[DesiredObject]) -> dict[str, DesiredObject]:
    return {o.key.name: o for o in objects}


def decoded(obj: DesiredObject) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in obj.manifest["data"].items()}


def test_kustomize_resources_and_secret_generator_inputs_decrypt(
    tmp_path: Path, secret_tools: SecretTools, private_tmp: Path
) -> None:
    key, recipient = secret_tools.age_key("kustomize")
    token, password, tls = (f"{w}-{uuid.uuid4().hex}" for w in ("token", "password", "tls"))
    repo = tmp_path / "repo"
    app = repo / "apps" / "web"
    encrypted(secret_tools, repo, "base/secret.yaml", SECRET.format(name="api", value=token), recipient)
    (repo / "base" / "kustomization.yaml").write_text("resources:\n- secret.yaml\n")
    sops_file(secret_tools, app / "db.env", f"PASSWORD={password}\nUSER=app\n", "dotenv", recipient)
    sops_file(secret_tools, app / "tls.key", f"-----KEY-----\n{tls}\n", "binary", recipient)
    sops_file(secret_tools, app / "config.yaml", f"db:\n  password: {password}\n", "yaml", recipient)
    (app / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  v: plain\n")
    (app / "kustomization.yaml").write_text(
        "resources:\n- ../../base\n- cm.yaml\nsecretGenerator:\n- name: db\n  envs:\n  - db.env\n"
        "- name: files\n  files:\n  - tls.key\n  - config.yaml\ngeneratorOptions:\n  disableNameSuffixHash: true\n"
    )
    objs = by_name(render(app, replace(options(secret_tools, key), repo_root=repo)))
    assert objs["api"].manifest["stringData"] == {"token": token}
    assert decoded(objs["db"]) == {"PASSWORD": password, "USER": "app"}
    files = decoded(objs["files"])
    assert files["tls.key"] == f"-----KEY-----\n{tls}\n"  # binary: byte for byte
    assert yaml.safe_load(files["config.yaml"]) == {"db": {"password": password}}  # as sops writes YAML back
    assert all(o.extra.get("sops") for o in objs.values())  # never stored on disk by the render cache
    assert list(private_tmp.iterdir()) == []  # the private copy is gone
    for path in repo.rglob("*"):  # the repository holds ciphertext only
        if path.is_file():
            assert token.encode() not in path.read_bytes() and password.encode() not in path.read_bytes()


def test_a_decrypted_value_outside_a_secret_and_undecrypted_inputs_are_refused(
    tmp_path: Path, secret_tools: SecretTools, private_tmp: Path
) -> None:
    key, recipient = secret_tools.age_key("guard")
    password = f"pw-{uuid.uuid4().hex}"
    app = tmp_path / "app"
    encrypted(secret_tools, app, "secret.yaml", SECRET.format(name="api", value=password), recipient)
    (app / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: copy\ndata:\n  v: x\n")
    (app / "kustomization.yaml").write_text(
        "resources:\n- secret.yaml\n- cm.yaml\nreplacements:\n- source: {kind: Secret, name: api, fieldPath: "
        "stringData.token}\n  targets:\n  - select: {kind: ConfigMap, name: copy}\n    fieldPaths: [data.v]\n"
    )
    with pytest.raises(RenderError, match=r"a value decrypted from secret.yaml ends up in ConfigMap copy") as err:
        render(app, options(secret_tools, key))
    assert password not in str(err.value) and list(private_tmp.iterdir()) == []
    # A configMapGenerator would put the values in a ConfigMap: refused naming the file, before sops runs.
    (app / "kustomization.yaml").write_text("configMapGenerator:\n- name: c\n  envs:\n  - db.env\n")
    sops_file(secret_tools, app / "db.env", f"PASSWORD={password}\n", "dotenv", recipient)
    with pytest.raises(RenderError, match=r"db.env: SOPS-encrypted configMapGenerator.envs input of"):
        render(app, options(secret_tools, key))
    # Without keys: refused naming the file and its recipient.
    (app / "kustomization.yaml").write_text("secretGenerator:\n- name: c\n  envs:\n  - db.env\n")
    with pytest.raises(RenderError, match=rf"db.env: SOPS-encrypted \(age {recipient}\), but no decryption key"):
        render(app, RenderOptions(kubectl=str(secret_tools.bin_dir / "kubectl")))


def chart(root: Path, templates: dict[str, str]) -> Path:
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: app\nversion: 0.1.0\n")
    for name, text in templates.items():
        (root / "templates" / name).write_text(text)
    return root


SECRET_TEMPLATE = (
    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app\nstringData:\n  password: {{ .Values.password | quote }}\n"
)
CM_TEMPLATE = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  v: {{ .Values.%s | quote }}\n"


def test_a_charts_own_encrypted_values_decrypt_and_other_values_files_are_refused(
    tmp_path: Path, secret_tools: SecretTools, private_tmp: Path
) -> None:
    key, recipient = secret_tools.age_key("values")
    password = f"pw-{uuid.uuid4().hex}"
    root = chart(tmp_path / "chart", {"secret.yaml": SECRET_TEMPLATE, "cm.yaml": CM_TEMPLATE % "image"})
    values = f"password: {password}\nimage: web:1.0\n"
    sops_file(secret_tools, root / "values.yaml", values, "yaml", recipient, "--encrypted-regex", "^password$")
    opts = options(secret_tools, key)
    opts.helm = str(secret_tools.bin_dir / "helm")
    objs = {o.key.kind: o for o in render(root, opts)}
    secret = objs["Secret"]
    assert secret.manifest["stringData"] == {"password": password}
    cm = objs["ConfigMap"]
    assert cm.manifest["data"] == {"v": "web:1.0"} and all(o.extra.get("sops") for o in objs.values())
    assert list(private_tmp.iterdir()) == [] and password.encode() not in (root / "values.yaml").read_bytes()
    # The password templated into a ConfigMap: refused, never shown.
    (root / "templates" / "cm.yaml").write_text(CM_TEMPLATE % "password")
    with pytest.raises(RenderError, match=r"a value decrypted from values.yaml ends up in ConfigMap app") as err:
        render(root, opts)
    assert password not in str(err.value)
    # --helm-values of the user's (not decrypted) and a sub-chart's values.yaml: refused, never templated.
    (root / "templates" / "cm.yaml").write_text(CM_TEMPLATE % "image")
    given = tmp_path / "secret-values.yaml"
    sops_file(secret_tools, given, values, "yaml", recipient)
    opts.helm_values = (given,)
    with pytest.raises(RenderError, match=r"secret-values.yaml: SOPS-encrypted Helm values file: decrypted only"):
        render(root, opts)
    opts.helm_values = ()
    sub = chart(root / "charts" / "sub", {"cm.yaml": CM_TEMPLATE.replace("name: app", "name: sub") % "password"})
    sops_file(secret_tools, sub / "values.yaml", values, "yaml", recipient)
    with pytest.raises(RenderError, match=r"charts/sub/values.yaml: SOPS-encrypted Helm values file"):
        render(root, opts)


def test_a_chart_sources_encrypted_values_files_are_given_to_helm_in_plaintext_from_a_private_copy(
    tmp_path: Path, secret_tools: SecretTools
) -> None:
    """helm-chart.yaml `valuesFiles` (the chart pulled from a registry: tests/integration/charts renders those;
    here the step that hands helm its values files, with the real sops)."""
    key, recipient = secret_tools.age_key("source")
    password = f"pw-{uuid.uuid4().hex}"
    plain, secret = tmp_path / "plain.yaml", tmp_path / "secret.yaml"
    plain.write_text("replicas: 2\n")
    sops_file(secret_tools, secret, f"password: {password}\n", "yaml", recipient)
    session = sops.Session(options(secret_tools, key).decryption)
    try:
        with sops_inputs.private_dir() as private:
            paths, found = sops_inputs.source_values(
                [plain, secret], ["app/plain.yaml", "app/secret.yaml"], private, session, 1 << 20
            )
            assert paths[0] == plain and paths[1].parent == private and (paths[1].stat().st_mode & 0o777) == 0o600
            assert paths[1].read_text() == f"password: {password}\n"
            assert found is not None and found.values == {password} and found.files == ["app/secret.yaml"]
        assert not private.exists()
        assert sops_inputs.source_values([plain], ["app/plain.yaml"], tmp_path, session, 1 << 20) == ([plain], None)
    finally:
        session.close()
