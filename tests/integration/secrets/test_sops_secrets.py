"""SOPS-encrypted Secrets end to end: encrypted with the reference `sops` (age and OpenPGP keys), committed,
decrypted by `gitops-sync render`/`diff`/`sync` in memory and applied to the real control plane.

Every output (stdout, stderr, debug logs, JSON/table/markdown reports) and the whole cache directory are
searched for the plaintext (as written and base64-encoded): it is only ever in the cluster. A wrong key, a
tampered MAC and a missing key are exit 2 naming the file, with nothing applied and nothing pruned.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import git
from secret_tools import MARKS, PgpKey, SecretTools, secret_tools_fixture  # noqa: F401  (the fixture `secret_tools`)

from tests.conftest import KubeCluster

pytestmark = MARKS


def secret_yaml(name: str, value: str) -> str:
    return f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\ntype: Opaque\nstringData:\n  password: {value}\n"


def configmap_yaml(name: str, value: str = "plain") -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  setting: {value}\n"


class Repo:
    """A Git work tree with an encrypted Secret; rendered by its branch (the files of a commit)."""

    def __init__(self, root: Path, tools: SecretTools) -> None:
        self.root, self.tools = root, tools
        root.mkdir()
        self.git = git.Repo.init(root, initial_branch="main")
        self.git.config_writer().set_value("user", "name", "t").set_value("user", "email", "t@t").release()

    def put(self, name: str, text: str) -> None:
        (self.root / name).write_text(text)

    def put_encrypted(self, name: str, text: str, *, age: str = "", pgp: PgpKey | None = None) -> None:
        plain = self.tools.work / f"plain-{uuid.uuid4().hex}.yaml"  # outside the repository
        plain.write_text(text)
        self.tools.encrypt(plain, self.root / name, age=age, pgp=pgp)
        plain.unlink()

    def commit(self, message: str) -> None:
        self.git.git.add("-A")
        self.git.git.commit("-q", "-m", message)


def gs(
    kube: KubeCluster, tools: SecretTools, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**kube.env, "PATH": f"{tools.bin_dir}{os.pathsep}{kube.env['PATH']}", **(env or {})}
    for name in ("SOPS_AGE_KEY_FILE", "SOPS_AGE_KEY"):
        if name not in (env or {}):
            full.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args], env=full, capture_output=True, text=True, timeout=180, check=False
    )


def forms(*values: str) -> list[str]:
    """A value as written and as the API server stores it (base64)."""
    return [f for v in values for f in (v, base64.b64encode(v.encode()).decode())]


def assert_never_shown(values: list[str], *texts: str) -> None:
    for text in texts:
        for value in values:
            assert value not in text, f"a secret value was printed:\n{text[:3000]}"


def assert_not_in_dir(values: list[str], directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            for value in values:
                assert value.encode() not in data, f"a secret value is on disk in {path}"


def live_password(kube: KubeCluster, namespace: str, name: str) -> str:
    doc: dict[str, Any] = json.loads(kube.kubectl("get", "secret", name, "-n", namespace, "-o", "json").stdout)
    return base64.b64decode(doc["data"]["password"]).decode()


def test_age_secret_applied_diffed_and_never_shown(
    kube: KubeCluster, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    key, recipient = secret_tools.age_key("team")
    value, live = f"s3cr3t-{uuid.uuid4().hex}", f"changed-live-{uuid.uuid4().hex}"
    repo = Repo(tmp_path / "repo", secret_tools)
    repo.put_encrypted("secret.yaml", secret_yaml("db", value), age=recipient)
    repo.put("cm.yaml", configmap_yaml("settings"))
    repo.commit("encrypted secret")
    assert value not in (repo.root / "secret.yaml").read_text()  # sops did encrypt it
    cache = tmp_path / "cache"
    src = ["--repo", str(repo.root), "--revision", "main", "-n", namespace, "--cache-dir", str(cache)]
    env = {"SOPS_AGE_KEY_FILE": str(key)}

    synced = gs(kube, secret_tools, "sync", *src, "-o", "json", "--log-level", "debug", env=env)
    assert synced.returncode == 0, synced.stderr
    assert live_password(kube, namespace, "db") == value
    outputs = [synced.stdout, synced.stderr]

    # The live value changes: diff compares the values and says they differ, printing neither.
    kube.kubectl("patch", "secret/db", "-n", namespace, "-p", json.dumps({"stringData": {"password": live}}))
    for fmt in ("json", "table", "markdown"):
        diffed = gs(kube, secret_tools, "diff", *src, "-o", fmt, "--log-level", "debug", env=env)
        assert diffed.returncode == 1, diffed.stderr
        outputs += [diffed.stdout, diffed.stderr]
        if fmt == "json":
            entry = next(o for o in json.loads(diffed.stdout)["objects"] if o["kind"] == "Secret")
            assert entry["action"] != "unchanged", entry
        assert "***" in diffed.stdout
    rendered = gs(kube, secret_tools, "render", *src, env=env)  # the work tree too: no --revision
    worktree = gs(kube, secret_tools, "render", "--repo", str(repo.root), "--cache-dir", str(cache), env=env)
    assert rendered.returncode == 0 and worktree.returncode == 0, rendered.stderr + worktree.stderr
    assert "password: '***'" in rendered.stdout and "password: '***'" in worktree.stdout
    outputs += [rendered.stdout, rendered.stderr, worktree.stdout, worktree.stderr]

    # A second sync takes the field back (kubectl owns it now); a key given by flag works as the environment's does.
    again = gs(
        kube, secret_tools, "sync", *src, "--sops-age-key-file", str(key), "-o", "table", "--on-conflict", "force"
    )
    assert again.returncode == 0, again.stderr
    assert live_password(kube, namespace, "db") == value
    outputs += [again.stdout, again.stderr]
    identity = next(ln for ln in key.read_text().splitlines() if ln.startswith("AGE-SECRET-KEY-"))
    assert_never_shown([*forms(value, live), identity], *outputs)  # the key neither
    # The render cache stores nothing for a source that decrypted anything (the clone holds ciphertext only).
    assert cache.is_dir()
    assert_not_in_dir(forms(value), cache)
    renders = cache / "renders"
    assert not (renders.exists() and list(renders.glob("*.json"))), list(renders.iterdir())


def test_pgp_secret_applied(kube: KubeCluster, namespace: str, tmp_path: Path, secret_tools: SecretTools) -> None:
    pgp = secret_tools.pgp_key("ops")
    value = f"pgp-s3cr3t-{uuid.uuid4().hex}"
    repo = Repo(tmp_path / "repo", secret_tools)
    repo.put_encrypted("secret.yaml", secret_yaml("api-token", value), pgp=pgp)
    repo.commit("pgp secret")
    src = ["--repo", str(repo.root), "--revision", "main", "-n", namespace, "--cache-dir", str(tmp_path / "cache")]
    # A long TMPDIR: gpg-agent's socket path in the run's GNUPGHOME must still fit (107 bytes).
    long_tmp = tmp_path / ("t" * 40)
    long_tmp.mkdir()
    pgp_flag = ["--sops-pgp-key-file", str(pgp.private)]
    synced = gs(kube, secret_tools, "sync", *src, *pgp_flag, "-o", "json", env={"TMPDIR": str(long_tmp)})
    assert synced.returncode == 0, synced.stderr
    assert live_password(kube, namespace, "api-token") == value
    assert_never_shown(forms(value), synced.stdout, synced.stderr)
    assert_not_in_dir(forms(value), tmp_path / "cache")
    # The private GNUPGHOME (with the imported private key) is gone, and so is the gpg-agent it started.
    short_tmp = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp"))
    try:
        rendered = gs(kube, secret_tools, "render", *src, *pgp_flag, env={"TMPDIR": str(short_tmp)})
        assert rendered.returncode == 0 and "api-token" in rendered.stdout, rendered.stderr
        assert list(short_tmp.iterdir()) == []
        agents = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
        assert str(short_tmp) not in agents
    finally:
        shutil.rmtree(short_tmp, ignore_errors=True)


def test_wrong_key_tampered_mac_and_no_key_apply_and_prune_nothing(
    kube: KubeCluster, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    key, recipient = secret_tools.age_key("right")
    wrong, _ = secret_tools.age_key("wrong")
    value = f"s3cr3t-{uuid.uuid4().hex}"
    repo = Repo(tmp_path / "repo", secret_tools)
    repo.put_encrypted("secret.yaml", secret_yaml("db", value), age=recipient)
    repo.put("keep.yaml", configmap_yaml("keep"))
    repo.put("changed.yaml", configmap_yaml("changed", "v1"))
    repo.commit("first")
    src = ["--repo", str(repo.root), "--revision", "main", "-n", namespace, "--cache-dir", str(tmp_path / "cache")]
    first = gs(kube, secret_tools, "sync", *src, "--prune", "--sops-age-key-file", str(key))
    assert first.returncode == 0, first.stderr

    # The next commit removes one object and changes another, and its Secret fails to decrypt.
    (repo.root / "keep.yaml").unlink()
    repo.put("changed.yaml", configmap_yaml("changed", "v2"))
    repo.commit("second")
    cases = {
        "wrong key": ({"SOPS_AGE_KEY_FILE": str(wrong)}, "no given key fits this SOPS file"),
        "no key": ({}, "no decryption key was given"),
    }
    for what, (env, message) in cases.items():
        r = gs(kube, secret_tools, "sync", *src, "--prune", "-o", "json", env=env)
        assert r.returncode == 2, (what, r.stdout, r.stderr)
        assert "secret.yaml" in r.stderr and message in r.stderr and recipient in r.stderr, (what, r.stderr)
        assert_never_shown(forms(value), r.stdout, r.stderr)
    # A value of the file changed in Git after encryption (its MAC no longer verifies).
    text = (repo.root / "secret.yaml").read_text()
    repo.put("secret.yaml", text.replace("name: db", "name: db-renamed"))
    repo.commit("tampered")
    r = gs(kube, secret_tools, "sync", *src, "--prune", "--sops-age-key-file", str(key))
    assert r.returncode == 2 and "secret.yaml" in r.stderr and "MAC does not verify" in r.stderr, r.stderr
    assert_never_shown(forms(value), r.stdout, r.stderr)
    # Nothing applied, nothing pruned, the Secret as the first commit made it.
    assert kube.kubectl("get", "configmap", "keep", "-n", namespace, check=False).returncode == 0
    changed = json.loads(kube.kubectl("get", "configmap", "changed", "-n", namespace, "-o", "json").stdout)
    assert changed["data"]["setting"] == "v1"
    assert live_password(kube, namespace, "db") == value
    assert kube.kubectl("get", "secret", "db-renamed", "-n", namespace, check=False).returncode != 0


def test_encrypted_kustomize_and_helm_inputs_sync_and_leave_nothing_on_disk(
    kube: KubeCluster, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    """A commit with a kustomization (an encrypted resource and a secretGenerator's encrypted dotenv file) and a
    chart (its own encrypted values.yaml): synced, the values only in the cluster, neither in any output nor in
    the cache directory nor left in $TMPDIR (the private copies kustomize and helm read are gone)."""
    key, recipient = secret_tools.age_key("tools")
    token, password, chart_pw = (f"{w}-{uuid.uuid4().hex}" for w in ("token", "pw", "chart"))
    repo = Repo(tmp_path / "repo", secret_tools)
    (repo.root / "app").mkdir()
    repo.put_encrypted("app/secret.yaml", secret_yaml("api", token), age=recipient)
    env_plain = secret_tools.work / f"db-{uuid.uuid4().hex}.env"
    env_plain.write_text(f"password={password}\n")
    args = ["sops", "encrypt", "--input-type", "dotenv", "--output-type", "dotenv", "--age", recipient]
    (repo.root / "app" / "db.env").write_bytes(secret_tools.run(*args, str(env_plain)))
    env_plain.unlink()
    repo.put(
        "app/kustomization.yaml",
        "resources:\n- secret.yaml\nsecretGenerator:\n- name: db\n  envs:\n  - db.env\n"
        "generatorOptions:\n  disableNameSuffixHash: true\n",
    )
    (repo.root / "chart" / "templates").mkdir(parents=True)
    repo.put("chart/Chart.yaml", "apiVersion: v2\nname: chart\nversion: 0.1.0\n")
    repo.put(
        "chart/templates/secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: chart-db\nstringData:\n  password: {{ .Values.password }}\n",
    )
    values_plain = secret_tools.work / f"values-{uuid.uuid4().hex}.yaml"
    values_plain.write_text(f"password: {chart_pw}\n")
    (repo.root / "chart" / "values.yaml").write_bytes(
        secret_tools.run("sops", "encrypt", "--age", recipient, str(values_plain))
    )
    values_plain.unlink()
    repo.commit("encrypted tool inputs")
    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    src = ["--repo", str(repo.root), "--revision", "main", "-n", namespace, "--cache-dir", str(cache)]
    env = {"SOPS_AGE_KEY_FILE": str(key), "TMPDIR": str(tmp)}
    outputs = []
    for command in ("sync", "diff"):
        done = gs(kube, secret_tools, command, *src, "-o", "json", "--log-level", "debug", env=env)
        assert done.returncode == 0, done.stderr
        outputs += [done.stdout, done.stderr]
    secret = json.loads(kube.kubectl("get", "secret", "api", "-n", namespace, "-o", "json").stdout)
    assert base64.b64decode(secret["data"]["password"]).decode() == token
    db = json.loads(kube.kubectl("get", "secret", "db", "-n", namespace, "-o", "json").stdout)
    assert base64.b64decode(db["data"]["password"]).decode() == password
    assert live_password(kube, namespace, "chart-db") == chart_pw
    assert_never_shown(forms(token, password, chart_pw), *outputs)
    assert_not_in_dir(forms(token, password, chart_pw), cache)
    renders = cache / "renders"
    assert not (renders.exists() and list(renders.glob("*.json")))
    assert list(tmp.iterdir()) == [], list(tmp.iterdir())
