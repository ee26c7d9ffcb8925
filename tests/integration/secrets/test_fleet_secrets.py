"""GitSync spec.decryption on the real API server with the real `sops`: age and OpenPGP keys from a Secret of
the GitSync's namespace, read as its ServiceAccount before every render.

An encrypted Secret (and a kustomization's secretGenerator reading an encrypted dotenv file) is applied and
its drift corrected with the value never shown; a rotated key Secret is
used without a restart; a commit whose file no key fits, or whose MAC does not verify, is Ready=False reason
DecryptionFailed naming the file, with nothing of it applied and nothing pruned; the controller's own
SOPS_AGE_KEY_FILE is never used for a GitSync; a tenant cannot decrypt with a key Secret its ServiceAccount
may not read, nor name another namespace's. The values, the identities and the private key are searched
for in the daemon's log, the Events, /status, every page, the GitSync status and the cache directory.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any

from secret_tools import MARKS, SecretTools, secret_tools_fixture  # noqa: F401  (the fixture `secret_tools`)

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_until
from tests.integration.test_fleet import cm_data, condition, crd, fleet_args, gitsync, gs_status
from tests.integration.test_fleet_tenant import _pages

pytestmark = MARKS
__all__ = ["crd"]  # a module-scoped fixture, shared


def secret_yaml(name: str, value: str) -> str:
    return f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\ntype: Opaque\nstringData:\n  password: {value}\n"


def encrypted(tools: SecretTools, name: str, value: str, **key: Any) -> str:
    plain = tools.work / f"plain-{uuid.uuid4().hex}.yaml"  # never in a repository
    out = tools.work / f"enc-{uuid.uuid4().hex}.yaml"
    plain.write_text(secret_yaml(name, value))
    tools.encrypt(plain, out, **key)
    plain.unlink()
    text = out.read_text()
    assert value not in text
    return text


def key_secret(name: str, namespace: str, data: dict[str, str]) -> str:
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}}
    return json.dumps({**doc, "type": "Opaque", "stringData": data}) + "\n"


def tenant(kube: KubeCluster, namespace: str, name: str, resources: str) -> None:
    """ServiceAccount `name` that may do anything with `resources` of `namespace`, and nothing else."""
    kube.kubectl("create", "serviceaccount", name, "-n", namespace)
    verbs = "--verb=get,list,watch,create,update,patch,delete"
    kube.kubectl("create", "role", name, "-n", namespace, verbs, f"--resource={resources}")
    kube.kubectl(
        "create", "rolebinding", name, "-n", namespace, f"--role={name}", f"--serviceaccount={namespace}:{name}"
    )


def apply(kube: KubeCluster, *docs: str) -> None:
    kube.kubectl("apply", "-f", "-", input="---\n".join(docs))


def live_password(kube: KubeCluster, namespace: str, name: str) -> str | None:
    doc = kube.find("secret", name, namespace)
    return None if doc is None else base64.b64decode(doc["data"]["password"]).decode()


def ready(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    return condition(kube, namespace, name, "Ready")


def failed_with(kube: KubeCluster, namespace: str, name: str, *words: str) -> bool:
    c = ready(kube, namespace, name)
    return (
        c.get("status") == "False" and c.get("reason") == "DecryptionFailed" and all(w in c["message"] for w in words)
    )


def env_of(kube: KubeCluster, tools: SecretTools, tmp_path: Path, **more: str) -> dict[str, str]:
    (tmp_path / "tmp").mkdir()
    return {
        **kube.env,
        "PATH": f"{tools.bin_dir}{os.pathsep}{kube.env['PATH']}",
        "TMPDIR": str(tmp_path / "tmp"),
        **more,
    }


def places(kube: KubeCluster, d: Daemon, namespace: str, names: list[str], tmp_path: Path) -> dict[str, str]:
    """Every place a value could show: GitSync status, /status, each page (while the daemon runs)."""
    found = {f"GitSync {n}": json.dumps(gs_status(kube, namespace, n)) for n in names}
    found["/status"] = d.get("/status")[1].decode()
    found.update({f"page {p}": html for p, html in _pages(d).items()})
    return found


def after_stop(kube: KubeCluster, log: Path, namespace: str, tmp_path: Path) -> dict[str, str]:
    """The daemon's log, the namespace's Events, every file of the cache directory."""
    found = {"daemon log": log.read_text(), "Events": json.dumps(kube.list("events", namespace))}
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file() and not path.is_symlink():
            found[f"cache {path}"] = path.read_bytes().decode(errors="replace")
    return found


def assert_nowhere(secrets: list[str], found: dict[str, str]) -> None:
    forms = [f for v in secrets for f in (v, base64.b64encode(v.encode()).decode())]
    for where, text in found.items():
        for value in forms:
            assert value not in text, f"a secret value or key leaked into {where}"


def test_gitsync_decrypts_age_and_openpgp_rotates_keys_and_refuses_bad_files(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    k1, r1 = secret_tools.age_key("team")
    k2, r2 = secret_tools.age_key("rotated")
    pgp = secret_tools.pgp_key("ops")
    v1, v2, v3 = (f"{w}-s3cr3t-{uuid.uuid4().hex}" for w in ("age", "pgp", "rotated"))
    live = f"live-edit-{uuid.uuid4().hex}"
    repos = tmp_path / "repos"
    a = GitRepo(
        repos / "a",
        {
            "secret.yaml": encrypted(secret_tools, "db", v1, age=r1),
            "keep.yaml": configmap("keep", {"v": "1"}),
            "changed.yaml": configmap("changed", {"v": "1"}),
        },
    )
    b = GitRepo(repos / "b", {"secret.yaml": encrypted(secret_tools, "pgp-db", v2, pgp=pgp)})
    v4 = f"kustomize-s3cr3t-{uuid.uuid4().hex}"  # a secretGenerator's encrypted dotenv file, OpenPGP
    env_file = secret_tools.work / f"db-{uuid.uuid4().hex}.env"
    env_file.write_text(f"password={v4}\n")
    dotenv = ["sops", "encrypt", "--input-type", "dotenv", "--output-type", "dotenv", "--pgp", pgp.fingerprint]
    c = GitRepo(
        repos / "c",
        {
            "app/db.env": secret_tools.run(*dotenv, str(env_file), env={"GNUPGHOME": str(pgp.home)}).decode(),
            "app/kustomization.yaml": "secretGenerator:\n- name: kust-db\n  envs:\n  - db.env\n"
            "generatorOptions:\n  disableNameSuffixHash: true\n",
        },
    )
    env_file.unlink()
    tenant(kube, namespace, "tenant", "configmaps,secrets")
    dec = {"provider": "sops", "secretRef": {"name": "sops-age"}}
    pgp_dec = {"provider": "sops", "secretRef": {"name": "sops-pgp"}}
    apply(
        kube,
        key_secret("sops-age", namespace, {"team.agekey": k1.read_text()}),
        key_secret("sops-pgp", namespace, {"ops.asc": pgp.private.read_text()}),
        gitsync("age", namespace, a.path, serviceAccountName="tenant", prune=True, interval="2s", decryption=dec),
        gitsync(
            "pgp",
            namespace,
            b.path,
            serviceAccountName="tenant",
            interval="2s",
            decryption=pgp_dec,
        ),
        gitsync("kust", namespace, c.path, path="app", serviceAccountName="tenant", decryption=pgp_dec),
        # No spec.decryption: the controller's own SOPS_AGE_KEY_FILE (k1, which fits) is never used.
        gitsync("nokeys", namespace, a.path, targetNamespace=f"{namespace}-none", interval="2s"),
    )
    log = tmp_path / "fleet.log"
    args = [*fleet_args(namespace, repos), "--cache-dir", str(tmp_path / "cache")]
    env = env_of(kube, secret_tools, tmp_path, SOPS_AGE_KEY_FILE=str(k1))
    with Daemon(args, env, log) as d:
        d.wait_ready(60)
        wait_until("age and pgp Ready", lambda: ready(kube, namespace, "age").get("status") == "True", 90, 0.3)
        wait_until("pgp Ready", lambda: ready(kube, namespace, "pgp").get("status") == "True", 60, 0.3)
        assert live_password(kube, namespace, "db") == v1 and live_password(kube, namespace, "pgp-db") == v2
        wait_until("kust Ready", lambda: ready(kube, namespace, "kust").get("status") == "True", 60, 0.3)
        assert live_password(kube, namespace, "kust-db") == v4
        wait_until(
            "nokeys refused", lambda: failed_with(kube, namespace, "nokeys", "secret.yaml", "no decryption key"), 30
        )
        assert "spec.decryption.secretRef" in ready(kube, namespace, "nokeys")["message"]
        pid = d.proc.pid

        # Drift: the live value is changed; the daemon puts Git's back, and says so without either value.
        kube.kubectl("patch", "secret/db", "-n", namespace, "-p", json.dumps({"stringData": {"password": live}}))
        wait_until("the drift corrected", lambda: live_password(kube, namespace, "db") == v1, 60, 0.3)

        # A new commit: the Secret re-encrypted for a new key, keep.yaml removed, changed.yaml changed. The key
        # Secret still holds the old key: refused naming the file, nothing of it applied, nothing pruned.
        rotated = a.commit(
            {
                "secret.yaml": encrypted(secret_tools, "db", v3, age=r2),
                "keep.yaml": None,
                "changed.yaml": configmap("changed", {"v": "2"}),
            }
        )
        wait_until(
            "the commit refused",
            lambda: failed_with(kube, namespace, "age", "secret.yaml", "no given key fits", r2),
            60,
            0.3,
        )
        assert gs_status(kube, namespace, "age")["lastAppliedRevision"] != rotated
        assert cm_data(kube, namespace, "keep") == {"v": "1"} and cm_data(kube, namespace, "changed") == {"v": "1"}
        assert live_password(kube, namespace, "db") == v1
        # The key Secret rotated: the next poll decrypts, applies and prunes; no restart.
        apply(kube, key_secret("sops-age", namespace, {"team.agekey": k2.read_text()}))
        wait_until("the rotated key used", lambda: live_password(kube, namespace, "db") == v3, 60, 0.3)
        wait_until("age Ready again", lambda: ready(kube, namespace, "age").get("status") == "True", 60, 0.3)
        wait_until("keep pruned", lambda: cm_data(kube, namespace, "keep") is None, 30, 0.3)
        assert cm_data(kube, namespace, "changed") == {"v": "2"} and d.proc.pid == pid and d.proc.poll() is None

        # The key removed again, without a new commit: the same commit is decrypted anew (the in-memory render
        # cache is keyed on the keys too) and refused; the key back, it is Ready again.
        age_keys = {k: key_secret("sops-age", namespace, {"team.agekey": k.read_text()}) for k in (k1, k2)}
        apply(kube, age_keys[k1])
        wait_until("the removed key noticed", lambda: failed_with(kube, namespace, "age", "no given key fits"), 60, 0.3)
        assert live_password(kube, namespace, "db") == v3  # what was applied stays
        apply(kube, age_keys[k2])
        wait_until(
            "age Ready with its key back", lambda: ready(kube, namespace, "age").get("status") == "True", 60, 0.3
        )

        # The MAC: a plain field changed after encryption (the name), and a new ConfigMap beside it.
        text = (a.path / "secret.yaml").read_text()
        a.commit({"secret.yaml": text.replace("name: db", "name: db-renamed"), "new.yaml": configmap("new", {})})
        wait_until(
            "the tampered file refused", lambda: failed_with(kube, namespace, "age", "secret.yaml", "MAC"), 60, 0.3
        )
        assert cm_data(kube, namespace, "new") is None and kube.find("secret", "db-renamed", namespace) is None
        assert live_password(kube, namespace, "db") == v3 and cm_data(kube, namespace, "changed") == {"v": "2"}
        assert kube.find("secret", "db", f"{namespace}-none") is None
        found = places(kube, d, namespace, ["age", "pgp", "kust", "nokeys"], tmp_path)
        assert d.stop() == 0
    found.update(after_stop(kube, log, namespace, tmp_path))
    assert "DecryptionFailed" in found["Events"] and "pgp-db" in found["/status"]  # the right places
    keys = [ln for k in (k1, k2) for ln in k.read_text().splitlines() if ln.startswith("AGE-SECRET-KEY-")]
    armored = [ln for ln in pgp.private.read_text().splitlines()[2:-2] if len(ln) > 40]
    assert_nowhere([v1, v2, v3, v4, live, *keys, *armored], found)
    assert not os.listdir(tmp_path / "tmp"), "a key or GNUPGHOME was left behind"


def test_a_tenant_cannot_decrypt_with_a_key_secret_it_may_not_read(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    key, recipient = secret_tools.age_key("team")
    value = f"s3cr3t-{uuid.uuid4().hex}"
    other = f"{namespace}-keys"[:63]
    kube.kubectl("create", "namespace", other)
    repos = tmp_path / "repos"
    repo = GitRepo(
        repos / "r",
        {"secret.yaml": encrypted(secret_tools, "db", value, age=recipient), "cm.yaml": configmap("cm", {})},
    )
    tenant(kube, namespace, "tenant", "configmaps")  # may not get Secrets, the key Secret included
    team_keys = {"team.agekey": key.read_text()}
    dec = {"provider": "sops", "secretRef": {"name": "team-keys"}}
    apply(
        kube,
        key_secret("team-keys", namespace, team_keys),
        key_secret("their-keys", other, team_keys),
        gitsync("nosy", namespace, repo.path, serviceAccountName="tenant", targetNamespace=other, decryption=dec),
        gitsync("admin", namespace, repo.path, interval="2s", decryption=dec),  # the controller's rights
    )
    # Only sops, and another namespace's Secret cannot even be named: the field has no namespace.
    vault = gitsync("vault", namespace, repo.path, decryption={"provider": "vault"})
    r = kube.kubectl("apply", "-f", "-", input=vault, check=False)
    assert r.returncode != 0 and "spec.decryption.provider" in r.stderr, r.stderr
    borrow = {"provider": "sops", "secretRef": {"name": "their-keys", "namespace": other}}
    r = kube.kubectl("apply", "-f", "-", input=gitsync("borrow", namespace, repo.path, decryption=borrow), check=False)
    assert r.returncode != 0 and "namespace" in r.stderr, r.stderr
    # Sent anyway without validation, the API server drops the field: the GitSync's own namespace is read.
    kube.kubectl(
        "apply", "--validate=false", "-f", "-", input=gitsync("borrow", namespace, repo.path, decryption=borrow)
    )
    log = tmp_path / "fleet.log"
    args = [*fleet_args(namespace, repos), "--cache-dir", str(tmp_path / "cache")]
    with Daemon(args, env_of(kube, secret_tools, tmp_path), log) as d:
        d.wait_ready(60)
        wait_until("admin Ready", lambda: ready(kube, namespace, "admin").get("status") == "True", 90, 0.3)
        assert live_password(kube, namespace, "db") == value  # the Secret and its key are good
        forbidden = f"Secret {namespace}/team-keys (spec.decryption.secretRef): ServiceAccount {namespace}/tenant"
        wait_until("nosy refused", lambda: failed_with(kube, namespace, "nosy", forbidden, "403 Forbidden"), 60, 0.3)
        missing = f"Secret {namespace}/their-keys (spec.decryption.secretRef) not found"
        wait_until("borrow refused", lambda: failed_with(kube, namespace, "borrow", missing), 60, 0.3)
        assert kube.find("secret", "db", other) is None and cm_data(kube, other, "cm") is None  # nothing applied
        found = places(kube, d, namespace, ["nosy", "admin", "borrow"], tmp_path)
        assert d.stop() == 0
    found.update(after_stop(kube, log, namespace, tmp_path))
    identity = next(ln for ln in key.read_text().splitlines() if ln.startswith("AGE-SECRET-KEY-"))
    assert_nowhere([value, identity], found)
