"""SOPS-encrypted manifests: recognised once a file is read, decrypted in memory by the reference `sops` CLI.

A manifest file (YAML or JSON) whose documents carry a `sops` block with a `mac` is sent to `sops --decrypt`
on stdin (`/dev/stdin`); its plaintext comes back on stdout and goes to the walker (render/_render.py) in
place of the file's bytes, never to disk. The keys are values held in memory (`Decryption`), so a CLI run
(flags and `SOPS_AGE_KEY_FILE` / `SOPS_AGE_KEY`, read by `from_cli`) and, later, a GitSync (a Secret's data,
`from_secret`) give the same input: age identities go to `sops` in its environment (`SOPS_AGE_KEY`), OpenPGP
private keys are imported into a GNUPGHOME made for the render (`Session`: 0700, removed with its gpg-agent
when the render ends).

Decrypted objects must be Secrets (the reports mask only Secret values) and are marked (`extra["sops"]`),
so the render cache never writes a render holding one to disk (rendercache.py; the daemon's store in memory
keeps it, as the daemon keeps its desired state). Errors name the file and the reason (MAC, no fitting key,
the recipients it was encrypted for), never sops' own stderr, which may quote what it read.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitops_sync.errors import DecryptionFailed, RenderError
from gitops_sync.gnupg import PrivateHome, private_home
from gitops_sync.resource import DesiredObject

# sops' exit codes (cmd/sops/codes) that have a cause we can name.
_MAC_MISMATCH, _MAC_NOT_FOUND, _NO_KEY = 51, 52, 128
_BAD_MAC_VALUE, _BAD_VALUE = 24, 25  # a value (or the MAC) whose authentication tag fails
_KEY_SOURCES = (
    "for the CLI: --sops-age-key-file, SOPS_AGE_KEY_FILE, SOPS_AGE_KEY or --sops-pgp-key-file; for a GitSync: "
    "spec.decryption.secretRef"
)
MARK = "sops"
_SUPPORTED = ("age", "pgp")
_CIPHERTEXT = "ENC[AES256_GCM,data:"  # DesiredObject.extra key of an object decrypted from a SOPS file


@dataclass(frozen=True)
class Decryption:
    """The keys a render may decrypt with, as values (never shown: repr counts them only)."""

    age: tuple[str, ...] = field(default=(), repr=False)  # AGE-SECRET-KEY-1... identities
    pgp: tuple[bytes, ...] = field(default=(), repr=False)  # armored OpenPGP private keys
    sops: str = "sops"  # the binary
    timeout: float = 60.0
    origin: str = "--sops-pgp-key-file"  # where the OpenPGP keys came from, for errors (a flag, a Secret)

    def __bool__(self) -> bool:
        return bool(self.age or self.pgp)

    def __repr__(self) -> str:
        return f"Decryption(age={len(self.age)} identities, pgp={len(self.pgp)} keys, sops={self.sops!r})"

    def fingerprint(self) -> str:
        """A digest of the keys, for the daemon's render cache in memory (a rotated key renders anew); never
        written anywhere."""
        h = hashlib.sha256()
        for key in [k.encode() for k in self.age] + list(self.pgp):
            h.update(hashlib.sha256(key).digest())
        return h.hexdigest()


def from_cli(age_files: Sequence[Path], pgp_files: Sequence[Path], environ: Mapping[str, str]) -> Decryption:
    """The CLI's keys: age identity files given by flag, else `SOPS_AGE_KEY_FILE`; plus `SOPS_AGE_KEY`
    (identities inline); OpenPGP private key files by flag. Read now, so a missing file fails before any
    fetch; a file's content is never quoted."""
    files = list(age_files) or ([Path(environ["SOPS_AGE_KEY_FILE"])] if environ.get("SOPS_AGE_KEY_FILE") else [])
    age: list[str] = []
    for path in files:
        age += _age_identities(_read_key(path, "age identity file").decode("utf-8", "replace"), str(path))
    if environ.get("SOPS_AGE_KEY"):
        age += _age_identities(environ["SOPS_AGE_KEY"], "SOPS_AGE_KEY")
    pgp = tuple(_read_key(p, "OpenPGP private key file") for p in pgp_files)
    return Decryption(age=tuple(age), pgp=pgp)


def from_secret(data: Mapping[str, bytes], where: str) -> Decryption:
    """The keys of a Kubernetes Secret's (decoded) data, in Flux's layout (kustomize-controller
    `spec.decryption`): entries named `*.agekey` hold age identities, `*.asc` armored OpenPGP private keys;
    others are ignored. For a GitSync's `spec.decryption.secretRef` (read as its ServiceAccount, at every
    fetch: daemon/fleet/keys.py); `where` names the Secret in errors, never a value."""
    age: list[str] = []
    for name in sorted(data):
        if name.endswith(".agekey"):
            age += _age_identities(data[name].decode("utf-8", "replace"), f"{where}, key {name}")
    pgp = tuple(data[name] for name in sorted(data) if name.endswith(".asc"))
    if not age and not pgp:
        raise DecryptionFailed(f"{where} holds no key: name entries *.agekey (age identities) or *.asc (OpenPGP)")
    return Decryption(age=tuple(age), pgp=pgp, origin=where)


def _read_key(path: Path, what: str) -> bytes:
    try:
        return path.expanduser().read_bytes()
    except OSError as err:
        raise RenderError(f"cannot read the {what} {path}: {err.strerror or type(err).__name__}") from None


def _age_identities(text: str, where: str) -> list[str]:
    """The `AGE-SECRET-KEY-1…` lines of an identity file (comments and public-key notes skipped)."""
    keys = [ln.strip() for ln in text.splitlines() if ln.strip().upper().startswith("AGE-SECRET-KEY-")]
    if not keys:
        raise DecryptionFailed(f"{where} holds no age identity (a line starting with AGE-SECRET-KEY-)")
    return keys


def encrypted(docs: Iterable[tuple[int, Any]]) -> bool:
    """Whether any document of a file is SOPS-encrypted: a top-level `sops` mapping with a `mac`."""
    return any(_metadata(value) is not None for _, value in docs)


def _metadata(value: Any) -> Mapping[str, Any] | None:
    meta = value.get("sops") if isinstance(value, Mapping) else None
    return meta if isinstance(meta, Mapping) and "mac" in meta else None


def refuse_in_tool_output(value: Any, where: str) -> None:
    """kustomize and helm pass a SOPS file through as it is (and a secretGenerator a SOPS env file's values):
    its ciphertext must never be applied."""
    if _metadata(value) is not None or (isinstance(value, Mapping) and _ciphertext_in_secret(value)):
        raise RenderError(
            "SOPS-encrypted manifest or values in a kustomization's or chart's output: kustomize or helm read an "
            "encrypted file gitops-sync does not decrypt for them (it decrypts a kustomization's resources and "
            "secretGenerator inputs inside the repository, and a chart's own values.yaml; see docs/secrets.md)",
            file=where,
        )


def refuse_values(docs: Sequence[tuple[int, Any]], name: str) -> None:
    """A SOPS-encrypted Helm values file that is not decrypted (helm would template its ciphertext): refused.
    A chart's own values.yaml and a helm-chart.yaml's valuesFiles are decrypted (render/sops_inputs.py)."""
    if encrypted(docs):
        raise RenderError(
            "SOPS-encrypted Helm values file: decrypted only as the rendered chart's own values.yaml or a "
            "helm-chart.yaml valuesFiles entry (not a sub-chart's or a pulled chart's values.yaml, nor --helm-values)",
            file=name,
        )


def _ciphertext_in_secret(value: Mapping[str, Any]) -> bool:
    """A Secret whose values are SOPS ciphertext (`ENC[AES256_GCM,…]`), as written or base64-encoded (folded
    lines too), or that holds a SOPS env/ini file's `sops_mac` entry."""
    if value.get("kind") != "Secret":
        return False
    plain, data = value.get("stringData"), value.get("data")
    texts = [v for v in plain.values() if isinstance(v, str)] if isinstance(plain, Mapping) else []
    for v in data.values() if isinstance(data, Mapping) else ():
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            texts.append(base64.b64decode("".join(v.split()), validate=True).decode("utf-8", "replace"))
    keys = [*(plain if isinstance(plain, Mapping) else ()), *(data if isinstance(data, Mapping) else ())]
    return "sops_mac" in keys or any(_CIPHERTEXT in t for t in texts)  # a dotenv/ini file's sops entries


class Session:
    """The decryptions of one render: its private HOME/GNUPGHOME is made at the first encrypted file (OpenPGP
    keys imported once, not per file) and removed by `close` when the render ends."""

    def __init__(self, keys: Decryption) -> None:
        self.keys = keys
        self._stack = contextlib.ExitStack()
        self._home: PrivateHome | None = None

    def close(self) -> None:
        self._home = None
        self._stack.close()

    def _private_home(self) -> PrivateHome:
        if self._home is None:
            home = self._stack.enter_context(private_home("gitops-sync-sops-"))  # HOME and GNUPGHOME of the render
            for armored in self.keys.pgp:
                home.import_keys(armored, self.keys.origin, DecryptionFailed, self.keys.timeout)
            self._home = home
        return self._home

    def decrypt(self, data: bytes, rel: str, docs: Sequence[tuple[int, Any]], fmt: str = "") -> bytes:
        """The plaintext of an encrypted file, from `sops --decrypt` reading stdin; raises RenderError naming
        `rel` (the file) and why, never a value. `docs`: the file's sops metadata as parsed, for its
        recipients; `fmt`: sops' input and output type (default: json for `.json`, else yaml)."""
        keys = self.keys
        _refuse_unsupported_only(docs, rel)
        if not keys:
            raise DecryptionFailed(
                f"SOPS-encrypted ({_recipients(docs)}), but no decryption key was given ({_KEY_SOURCES})", file=rel
            )
        home = self._private_home()
        env = {**home.env, "SOPS_AGE_KEY": "\n".join(keys.age)} if keys.age else home.env
        fmt = fmt or ("json" if rel.lower().endswith(".json") else "yaml")
        # --decrypt and /dev/stdin, not `decrypt` reading stdin: sops before 3.9 knows only these.
        argv = [keys.sops, "--decrypt", "--input-type", fmt, "--output-type", fmt, "/dev/stdin"]
        try:
            done = subprocess.run(
                argv, input=data, env=env, capture_output=True, timeout=keys.timeout, check=False, cwd=home.path
            )
        except FileNotFoundError:
            raise DecryptionFailed(
                f"`{keys.sops}` not found, needed to decrypt this SOPS file: build it with "
                "`deploy/local-cluster/cluster.py build --with sops` (or install sops) and put it on PATH",
                file=rel,
            ) from None
        except subprocess.TimeoutExpired:
            raise DecryptionFailed(f"`sops --decrypt` did not finish within {keys.timeout:g}s", file=rel) from None
        return _outcome(done, rel, docs)


def _outcome(done: subprocess.CompletedProcess[bytes], rel: str, docs: Sequence[tuple[int, Any]]) -> bytes:
    """sops' stdout, or the RenderError its exit code names (its stderr is never quoted)."""
    if done.returncode in (_MAC_MISMATCH, _MAC_NOT_FOUND):
        raise DecryptionFailed("SOPS file's MAC does not verify: the file was changed after it was encrypted", file=rel)
    if done.returncode in (_BAD_MAC_VALUE, _BAD_VALUE):
        raise DecryptionFailed(
            "SOPS file does not decrypt: an encrypted value fails its authentication (changed or damaged)", file=rel
        )
    if done.returncode == _NO_KEY:
        raise DecryptionFailed(f"no given key fits this SOPS file (encrypted for {_recipients(docs)})", file=rel)
    if done.returncode != 0:
        raise DecryptionFailed(f"`sops --decrypt` failed (exit {done.returncode}); the file is not applied", file=rel)
    return done.stdout


def _key_entries(docs: Sequence[tuple[int, Any]]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(key type, entry) of every master key a file's sops blocks list, `key_groups` included."""
    for _, value in docs:
        meta = _metadata(value) or {}
        groups = [meta, *(g for g in meta.get("key_groups") or [] if isinstance(g, Mapping))]
        for group in groups:  # every list of keys: age, pgp, and kms, gcp_kms, hckms, azure_kv, hc_vault, …
            for kind, entries in group.items():
                for entry in entries if isinstance(entries, list) and kind != "key_groups" else []:
                    if isinstance(entry, Mapping):
                        yield str(kind), entry


def _recipients(docs: Sequence[tuple[int, Any]]) -> str:
    """Who a file was encrypted for, from its sops block: age recipients and OpenPGP fingerprints (public)."""
    found = [
        f"age {entry['recipient']}" if kind == "age" else f"OpenPGP {entry['fp']}"
        for kind, entry in _key_entries(docs)
        if isinstance(entry.get({"age": "recipient", "pgp": "fp"}.get(kind, "")), str)
    ]
    unique = list(dict.fromkeys(found))
    return ", ".join(unique) if unique else "no age or OpenPGP recipient"


def _refuse_unsupported_only(docs: Sequence[tuple[int, Any]], rel: str) -> None:
    """A file encrypted only for cloud KMS or Vault keys: sops would reach for them (a KMS service, a Vault
    address written in the file) with whatever credentials it finds; refused before it runs."""
    kinds = {kind for kind, _ in _key_entries(docs)}
    if kinds and not kinds & set(_SUPPORTED):
        raise DecryptionFailed(
            f"SOPS file encrypted only for {', '.join(sorted(kinds))} keys: gitops-sync decrypts with age and "
            "OpenPGP keys only (add an age or OpenPGP recipient with `sops updatekeys`)",
            file=rel,
        )


def check_decrypted(value: Any, where: str) -> None:
    """A decrypted document must be a Secret: reports and `diff` mask Secret values only."""
    if not (isinstance(value, Mapping) and value.get("apiVersion") == "v1" and value.get("kind") == "Secret"):
        found = value.get("kind") if isinstance(value, Mapping) else None
        kind = found if isinstance(found, str) else "?"
        raise RenderError(
            f"a SOPS-encrypted file may hold only Secrets (v1), found kind {kind[:63]}: the values of other "
            "kinds would show in diff and render output",
            file=where,
        )


def mark(obj: DesiredObject) -> DesiredObject:
    obj.extra[MARK] = True
    return obj


def any_decrypted(objects: Iterable[DesiredObject]) -> bool:
    """A render holding a decrypted Secret is never stored by the render cache (on disk or in memory)."""
    return any(o.extra.get(MARK) for o in objects)
