"""A helm-chart.yaml whose values file is SOPS-encrypted, against the real registry, sops and helm: the values
reach helm in plaintext from a private copy, helm's output is never kept on disk (`charts/renders/`, which holds
the output of plain values), and a decrypted value templated into a ConfigMap is refused without being shown."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from chart_registries import Published, Registries, render_cli

from tests.integration.secrets.secret_tools import SecretTools, secret_tools_fixture

pytestmark = pytest.mark.timeout(1200)  # sops may be built by the first test that needs it
__all__ = ["secret_tools_fixture"]


def test_an_encrypted_values_file_of_a_chart_source(
    registries: Registries, published: Published, tmp_path: Path, secret_tools: SecretTools
) -> None:
    key, recipient = secret_tools.age_key("chart")
    greeting, token = f"greet-{uuid.uuid4().hex}", f"token-{uuid.uuid4().hex}"
    web = tmp_path / "repo" / "apps" / "web"
    web.mkdir(parents=True)
    spec = {"repo": published.https, "chartName": "hello", "chartVersion": "0.1.0", "releaseName": "web"}
    (web / "helm-chart.yaml").write_text(json.dumps({"helmChart": {**spec, "valuesFiles": ["secret-values.yaml"]}}))
    plain = secret_tools.work / f"values-{uuid.uuid4().hex}.yaml"

    def encrypt(text: str) -> None:
        plain.write_text(text)
        args = ["sops", "encrypt", "--age", recipient, "--encrypted-regex", "^(token|greeting)$", str(plain)]
        (web / "secret-values.yaml").write_bytes(secret_tools.run(*args))
        plain.unlink()

    creds = registries.credentials_file(tmp_path / "creds.json")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {
        "SOPS_AGE_KEY_FILE": str(key),
        "TMPDIR": str(tmp),
        "PATH": f"{secret_tools.bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    renders = tmp_path / "cache" / "charts" / "renders"

    # A value the chart does not template (token): rendered, and nothing of this render kept.
    encrypt(f"token: {token}\nreplicas: 2\n")
    r = render_cli(registries, tmp_path / "repo", tmp_path, creds, env_extra=env)
    assert r.returncode == 0, r.stderr
    assert "replicas: 2" in r.stdout and token not in r.stdout + r.stderr
    assert not (renders.exists() and list(renders.iterdir())), "helm's output of decrypted values kept on disk"
    assert list(tmp.iterdir()) == []

    # A decrypted value the chart puts into a ConfigMap: refused, shown nowhere, kept nowhere.
    encrypt(f"greeting: {greeting}\n")
    r = render_cli(registries, tmp_path / "repo", tmp_path, creds, env_extra=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "a value decrypted from apps/web/secret-values.yaml ends up in ConfigMap web-config" in r.stderr
    assert greeting not in r.stdout + r.stderr and list(tmp.iterdir()) == []
    for path in (tmp_path / "cache").rglob("*"):
        assert not path.is_file() or greeting.encode() not in path.read_bytes(), path
