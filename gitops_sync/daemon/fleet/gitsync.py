"""The GitSync custom resource: its spec read into a `SourceSpec`, its paths, finalizer and shard.

The fleet controller (controller.py) reads each GitSync through `parse` and builds a `SourceReconciler`
from it; its status documents are built in status.py. The CLI (fleetctl.py) reads GitSyncs through this
module alone, so `gitops-sync get` imports nothing of the server (no metrics, no reconciler). Pure
functions only: no cluster access here.
"""

from __future__ import annotations

import hashlib
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitops_sync.conventions import RECONCILE_REQUESTED, ConflictPolicy
from gitops_sync.daemon.reconcile.desired import SourceSpec
from gitops_sync.engine import PassOptions, SourceOptions
from gitops_sync.options import parse_duration
from gitops_sync.render.charts import RepositoryAccess
from gitops_sync.render.sops import Decryption
from gitops_sync.resource import Manifest, ObjectKey
from gitops_sync.source.credentials import GitCredentials

if TYPE_CHECKING:
    from gitops_sync.source.verify import TrustedKeys

GROUP = "gitops-sync.io"
VERSION = "v1alpha1"
KIND = "GitSync"
PLURAL = "gitsyncs"
API_VERSION = f"{GROUP}/{VERSION}"
RECONCILE_ANNOTATION = RECONCILE_REQUESTED  # every key lives in conventions.py
CONDITION_TYPES = ("Ready", "Reconciling", "Stalled", "Drifted", "Conflicted", "Suspended")
# spec fields that change how a source is run, not what it is: changing one keeps its reconciler (and status).
_RUN_FIELDS = frozenset({"suspend"})
# On a GitSync whose deletion prunes its objects (see `wants_finalizer`): the controller garbage-collects
# them before the API server lets the GitSync go (as Flux's Kustomization finalizer does).
FINALIZER = "gitops-sync.io/finalizer"
# spec.deletionPolicy, Flux's names: what deleting the GitSync does to its objects.
MIRROR_PRUNE = "MirrorPrune"  # delete them when spec.prune is true (the default)
DELETE = "Delete"  # delete them whatever spec.prune says
WAIT_FOR_TERMINATION = "WaitForTermination"  # as Delete, and wait until they are gone (or spec.timeout passed)
ORPHAN = "Orphan"  # leave them
DELETION_POLICIES = (MIRROR_PRUNE, DELETE, WAIT_FOR_TERMINATION, ORPHAN)


class InvalidSpec(ValueError):
    """A GitSync the controller cannot act on; the message names the object and the field."""

    reason = "InvalidSpec"  # of its Ready condition and Event


def collection_path(namespace: str | None = None) -> str:
    base = f"/apis/{GROUP}/{VERSION}"
    return f"{base}/namespaces/{namespace}/{PLURAL}" if namespace else f"{base}/{PLURAL}"


def object_path(namespace: str, name: str, subresource: str = "") -> str:
    return f"{collection_path(namespace)}/{name}" + (f"/{subresource}" if subresource else "")


@dataclass(frozen=True)
class KubeConfigRef:
    """spec.kubeConfig.secretRef (Flux's shape): a Secret in the GitSync's namespace holding the kubeconfig
    of the target cluster under `key` ("" = `value`, else `value.yaml`)."""

    secret: str
    key: str = ""

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key,) if self.key else ("value", "value.yaml")

    def describe(self, namespace: str) -> str:
        return f"Secret {namespace}/{self.secret}"


# spec.verify.mode, Flux's names (matched without case): what must be signed by a trusted key.
VERIFY_MODES = {"head": (True, False), "tag": (False, True), "tagandhead": (True, True)}  # (commit, tag)


@dataclass(frozen=True)
class VerifyRef:
    """spec.verify: the rendered commit (HEAD) and/or the tag spec.revision names must be signed by a key of
    Secret `secret` (its `*.asc` OpenPGP keys and `allowed_signers`), read as the GitSync's ServiceAccount."""

    secret: str
    commits: bool = True
    tags: bool = False


@dataclass(frozen=True)
class GitSync:
    """One GitSync as the controller acts on it."""

    namespace: str
    name: str
    generation: int
    uid: str
    repository: str
    revision: str | None
    path: str | None
    interval: float
    prune: bool
    self_heal: bool
    policy: ConflictPolicy
    target_namespace: str
    service_account: str
    suspend: bool
    depends_on: tuple[tuple[str, str], ...]
    wait: bool
    timeout: float
    reconcile_requested: str = ""
    spec_doc: dict[str, Any] = field(default_factory=dict, compare=False)
    deletion_policy: str = MIRROR_PRUNE
    prune_cascade: bool = False  # spec.pruneCascade: the cascade guard does not refuse its prunes
    kube_config: KubeConfigRef | None = None  # spec.kubeConfig.secretRef: the target cluster (None: this one)
    secret_ref: str = ""  # spec.secretRef.name: a Secret of this namespace holding its Git credentials
    # spec.decryption (provider sops): secretRef.name, a Secret of this namespace holding SOPS keys ("" = none
    # given: an encrypted file fails); None: no spec.decryption (an encrypted file fails naming the field).
    decryption: str | None = None
    verify: VerifyRef | None = None  # spec.verify: signatures checked before a commit is rendered
    # spec.chartCredentials: (repository URL prefix, Secret of this namespace) for its charts and OCI artifacts
    chart_credentials: tuple[tuple[str, str], ...] = ()
    # Every spec field `parse` asked for, present or not ("kubeConfig.secretRef.key", "dependsOn[].name"):
    # what the installed CRD's schema must declare, or the API server prunes it (crd.py).
    fields: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def wants_finalizer(self) -> bool:
        """Only a source that writes, and whose deletion policy deletes, collects its objects when deleted
        (MirrorPrune: when it prunes); the rest orphan them."""
        if not self.self_heal or self.deletion_policy == ORPHAN:
            return False
        return self.prune or self.deletion_policy in (DELETE, WAIT_FOR_TERMINATION)

    @property
    def cascade_advice(self) -> str:
        """How a refusal of the cascade guard tells this GitSync's owner to override it."""
        return f"set spec.pruneCascade: true on GitSync {self.ref}"

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(GROUP, KIND, self.namespace, self.name)

    @property
    def impersonate(self) -> str:
        """The user every request of this source is sent as ("" = the controller's own)."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}" if self.service_account else ""

    def source_spec(
        self,
        base: SourceOptions,
        *,
        debounce: float,
        credentials: Callable[[], GitCredentials | None] | None = None,
        decryption: Callable[[], Decryption] | None = None,
        verify: Callable[[], TrustedKeys] | None = None,
        chart_credentials: Callable[[], tuple[RepositoryAccess, ...]] | None = None,
    ) -> SourceSpec:
        """Options of the source: the controller's render options, this object's repository and policy;
        `credentials`, `decryption`, `verify` and `chart_credentials`: what reads its spec.secretRef,
        spec.decryption, spec.verify and spec.chartCredentials Secrets at every fetch or pass (sources.py)."""
        src = SourceOptions(
            repo=self.repository,
            revision=self.revision,
            path=self.path,
            cache_dir=base.cache_dir,
            render=base.render,
            timeout=base.timeout,
            local_policy=base.local_policy,
            credentials=credentials,
            decryption=decryption,
            verify=verify,
            chart_credentials=chart_credentials,
        )
        # The ApplySet parent (inventory) of a GitSync is named after it and lives beside it.
        pass_opts = PassOptions(
            namespace=self.target_namespace,
            prune=self.prune,
            policy=self.policy,
            wait=self.wait,
            timeout=self.timeout,
            name=f"gitsync-{self.name}",
            inventory_namespace=self.namespace,
            prune_cascade=self.prune_cascade,
            cascade_advice=self.cascade_advice,
        )
        return SourceSpec(src, pass_opts, self_heal=self.self_heal, debounce=debounce)


def parse(obj: Manifest) -> GitSync:
    """The GitSync's spec, checked beyond what the CRD's schema already refused."""
    meta = obj.get("metadata") or {}
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    where = f"GitSync {ns}/{name}"
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise InvalidSpec(f"{where}: spec is missing")
    asked: set[str] = set()
    spec = _Asked(spec, "", asked)
    repo = spec.get("repository")
    if not isinstance(repo, str) or not repo.strip():
        raise InvalidSpec(f"{where}: spec.repository is required")

    def duration(key: str, default: str) -> float:
        try:
            return parse_duration(spec.get(key) or default)
        except ValueError as exc:
            raise InvalidSpec(f"{where}: spec.{key}: {exc}") from None

    self_heal, policy, deletion_policy = _policies(spec, where)
    path = spec.get("path") or None
    if path is not None and (str(path).startswith("/") or ".." in str(path).split("/")):
        raise InvalidSpec(f"{where}: spec.path must be relative and stay inside the repository")
    annotations = meta.get("annotations") or {}
    return GitSync(
        namespace=ns,
        name=name,
        generation=int(meta.get("generation") or 0),
        uid=str(meta.get("uid") or ""),
        repository=repo.strip(),
        revision=spec.get("revision") or None,
        path=path,
        interval=duration("interval", "1m"),
        prune=bool(spec.get("prune", False)),
        self_heal=self_heal,
        policy=policy,
        target_namespace=str(spec.get("targetNamespace") or ns),
        service_account=str(spec.get("serviceAccountName") or ""),
        suspend=bool(spec.get("suspend", False)),
        depends_on=_depends_on(spec, ns, where),
        wait=bool(spec.get("wait", False)),
        timeout=duration("timeout", "5m"),
        reconcile_requested=str(annotations.get(RECONCILE_ANNOTATION) or ""),
        spec_doc={k: v for k, v in spec.items() if k not in _RUN_FIELDS},
        deletion_policy=deletion_policy,
        prune_cascade=bool(spec.get("pruneCascade", False)),
        kube_config=kube_config_of(spec, where),
        secret_ref=_secret_ref(spec, ns, where),
        decryption=_decryption(spec, ns, where),
        verify=_verify(spec, where),
        chart_credentials=chart_credentials_of(spec, where),
        fields=frozenset(asked),  # the last argument: every read above is in
    )


def spec_fields() -> frozenset[str]:
    """The spec fields the model reads of every GitSync: a minimal one makes `parse` ask for each optional
    top-level field (each read with its default). Fields inside an object (`kubeConfig.secretRef.name`) are
    asked only when their parent is set: `GitSync.fields` has them, per object."""
    return parse({"metadata": {"namespace": "-", "name": "-"}, "spec": {"repository": "-"}}).fields


class _Asked(dict[str, Any]):
    """A spec, or an object in one, that notes every field read of it (`get`, `[]`, `in`), present or not,
    by its path: what `parse` and its helpers read is the model's list of fields, never a list kept by hand.
    Objects and lists read of it are wrapped alike (`dependsOn[].name`); `items()` reads nothing."""

    def __init__(self, data: dict[str, Any], prefix: str, asked: set[str]) -> None:
        super().__init__(data)
        self._prefix, self._asked = prefix, asked

    def _note(self, key: object, value: Any) -> Any:
        path = f"{self._prefix}{key}"
        self._asked.add(path)
        return _asking(value, path, self._asked)

    def get(self, key: str, default: Any = None) -> Any:
        return self._note(key, super().get(key, default))

    def __getitem__(self, key: str) -> Any:
        return self._note(key, super().__getitem__(key))

    def __contains__(self, key: object) -> bool:
        self._note(key, None)
        return super().__contains__(key)


def _asking(value: Any, path: str, asked: set[str]) -> Any:
    if isinstance(value, dict):
        return _Asked(value, f"{path}.", asked)
    if isinstance(value, list):
        return [_asking(v, f"{path}[]", asked) for v in value]
    return value


def _policies(spec: dict[str, Any], where: str) -> tuple[bool, ConflictPolicy, str]:
    """spec.mode (self-heal: True), spec.conflictPolicy and spec.deletionPolicy, checked."""
    mode = str(spec.get("mode") or "self-heal")
    if mode not in ("self-heal", "detect-only"):
        raise InvalidSpec(f"{where}: spec.mode must be self-heal or detect-only, not {mode!r}")
    try:
        policy = ConflictPolicy(str(spec.get("conflictPolicy") or "force"))
    except ValueError:
        raise InvalidSpec(
            f"{where}: spec.conflictPolicy must be one of {', '.join(p.value for p in ConflictPolicy)}"
        ) from None
    deletion_policy = str(spec.get("deletionPolicy") or MIRROR_PRUNE)
    if deletion_policy not in DELETION_POLICIES:
        raise InvalidSpec(f"{where}: spec.deletionPolicy must be one of {', '.join(DELETION_POLICIES)}")
    return mode == "self-heal", policy, deletion_policy


def kube_config_of(spec: dict[str, Any], where: str) -> KubeConfigRef | None:
    """spec.kubeConfig.secretRef: {name, key?}; None when the GitSync targets the controller's cluster."""
    kc = spec.get("kubeConfig")
    if kc is None:
        return None
    ref = _named_secret(kc, "spec.kubeConfig", where)
    key = ref.get("key") or ""
    if not isinstance(key, str):
        raise InvalidSpec(f"{where}: spec.kubeConfig.secretRef.key must be a string")
    return KubeConfigRef(ref["name"], key)


def _named_secret(block: object, field: str, where: str) -> dict[str, Any]:
    """`block`'s secretRef, which must name a Secret (of the GitSync's namespace: there is no namespace field)."""
    ref = block.get("secretRef") if isinstance(block, dict) else None
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not ref["name"]:
        raise InvalidSpec(f"{where}: {field}.secretRef.name is required (a Secret in the GitSync's namespace)")
    return ref


def _secret_ref(spec: dict[str, Any], ns: str, where: str) -> str:
    """spec.secretRef.name ("" when none): always a Secret of the GitSync's own namespace."""
    ref = spec.get("secretRef") or {}
    if not isinstance(ref, dict) or not isinstance(ref.get("name", ""), str):
        raise InvalidSpec(f"{where}: spec.secretRef must be {{name: <a Secret in {ns}>}}")
    return str(ref.get("name") or "")


def _decryption(spec: dict[str, Any], ns: str, where: str) -> str | None:
    """spec.decryption (Flux's shape): {provider: sops, secretRef: {name}}; the Secret's name ("" without one)."""
    dec = spec.get("decryption")
    if dec is None:
        return None
    ref = dec.get("secretRef") if isinstance(dec, dict) else None
    if not isinstance(dec, dict) or dec.get("provider") != "sops":
        raise InvalidSpec(f"{where}: spec.decryption.provider must be sops")
    if ref is not None and (not isinstance(ref, dict) or not isinstance(ref.get("name", ""), str)):
        raise InvalidSpec(f"{where}: spec.decryption.secretRef must be {{name: <a Secret in {ns}>}}")
    return str((ref or {}).get("name") or "")


def _verify(spec: dict[str, Any], where: str) -> VerifyRef | None:
    """spec.verify: {mode: HEAD|Tag|TagAndHEAD (default HEAD), secretRef: {name}}; None when absent."""
    v = spec.get("verify")
    if v is None:
        return None
    ref = _named_secret(v, "spec.verify", where)
    mode = str(v.get("mode") or "HEAD")
    if mode.lower() not in VERIFY_MODES:
        raise InvalidSpec(f"{where}: spec.verify.mode must be HEAD, Tag or TagAndHEAD, not {mode!r}")
    if VERIFY_MODES[mode.lower()][1] and not spec.get("revision"):
        raise InvalidSpec(f"{where}: spec.verify.mode {mode} needs spec.revision naming the signed tag")
    commits, tags = VERIFY_MODES[mode.lower()]
    return VerifyRef(ref["name"], commits=commits, tags=tags)


def chart_credentials_of(spec: dict[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    """spec.chartCredentials: [{url, secretRef: {name}}] -> ((url, Secret name), ...), each Secret of the
    GitSync's own namespace; a URL is an https://, http:// or oci:// prefix without credentials in it."""
    out: list[tuple[str, str]] = []
    entries = spec.get("chartCredentials") or []
    if not isinstance(entries, list):
        raise InvalidSpec(f"{where}: spec.chartCredentials must be a list of {{url, secretRef: {{name}}}}")
    for i, entry in enumerate(entries):
        at = f"{where}: spec.chartCredentials[{i}]"
        url = entry.get("url") if isinstance(entry, dict) else None
        ref = entry.get("secretRef") if isinstance(entry, dict) else None
        name = ref.get("name") if isinstance(ref, dict) else None
        if not isinstance(url, str) or not isinstance(name, str) or not name:
            raise InvalidSpec(f"{at} needs a url and secretRef.name (a Secret in the GitSync's namespace)")
        parsed = urllib.parse.urlsplit(url.strip())
        if parsed.scheme not in ("https", "http", "oci") or not parsed.hostname or parsed.username or parsed.query:
            raise InvalidSpec(f"{at}.url must be an https:// or oci:// URL prefix without credentials or query")
        out.append((url.strip().rstrip("/"), name))
    return tuple(out)


def _depends_on(spec: dict[str, Any], ns: str, where: str) -> tuple[tuple[str, str], ...]:
    deps: list[tuple[str, str]] = []
    for i, dep in enumerate(spec.get("dependsOn") or []):
        if not isinstance(dep, dict) or not dep.get("name"):
            raise InvalidSpec(f"{where}: spec.dependsOn[{i}] needs a name")
        deps.append((str(dep.get("namespace") or ns), str(dep["name"])))
    return tuple(deps)


def is_deleting(obj: Manifest) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def finalizers(obj: Manifest) -> list[str]:
    return [str(f) for f in (obj.get("metadata") or {}).get("finalizers") or []]


def finalizer_patch(obj: Manifest, *, present: bool) -> Manifest | None:
    """A merge patch adding or removing FINALIZER (guarded by resourceVersion: other finalizers are kept
    as read, and a GitSync changed meanwhile is a 409, retried on its next event); None: nothing to do."""
    have = finalizers(obj)
    if (FINALIZER in have) == present:
        return None
    want = [*have, FINALIZER] if present else [f for f in have if f != FINALIZER]
    rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return {"metadata": {"finalizers": want, "resourceVersion": rv}}


def shard_of(namespace: str, name: str, shards: int) -> int:
    """Stable across processes and restarts (not Python's salted hash): every replica agrees."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % max(shards, 1)


def is_ready(obj: Manifest) -> bool:
    """Ready=True for the current generation: what `dependsOn` waits for (as `kubectl wait` would)."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def with_transition_times(doc: dict[str, Any], previous: list[dict[str, Any]], now: float | None = None) -> None:
    """Keep each condition's lastTransitionTime unless its status changed (as metav1.Condition wants)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now if now is not None else time.time()))
    before = {c.get("type"): c for c in previous}
    for c in doc.get("conditions") or []:
        old = before.get(c["type"])
        c["lastTransitionTime"] = (
            (old.get("lastTransitionTime") or stamp) if old and old.get("status") == c["status"] else stamp
        )


def without_times(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in conditions]


__all__ = [
    "API_VERSION",
    "CONDITION_TYPES",
    "DELETE",
    "DELETION_POLICIES",
    "FINALIZER",
    "GROUP",
    "KIND",
    "MIRROR_PRUNE",
    "ORPHAN",
    "PLURAL",
    "RECONCILE_ANNOTATION",
    "VERSION",
    "WAIT_FOR_TERMINATION",
    "GitSync",
    "InvalidSpec",
    "KubeConfigRef",
    "VerifyRef",
    "collection_path",
    "is_ready",
    "kube_config_of",
    "object_path",
    "parse",
    "shard_of",
    "spec_fields",
    "with_transition_times",
    "without_times",
]
