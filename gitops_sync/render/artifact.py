"""An OCI artifact as the source (Flux `OCIRepository`, the `flux push artifact` layout): a manifest whose one
layer is a .tar.gz of manifests. `--repo oci://host/repository:tag` (or `@sha256:<manifest digest>`).

Each pass asks the registry for the manifest only (the tag's check); the layer is fetched, its sha256 checked
against the manifest, bounded and unpacked (_chart_archive.unpack_tree: no link, no `..`, sizes) once per
manifest digest into `<cache>/artifacts/sha256-<hex>/tree`, renamed into place whole. The manifest digest is
the revision every report names. engine/loading.py turns it into a Checkout; credentials and trust are the
chart credentials file's (charts.RepositoryAccess), through the same client as OCI charts (_chart_client.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gitops_sync.errors import RenderError
from gitops_sync.log import get_logger
from gitops_sync.render._chart_archive import unpack_tree
from gitops_sync.render._chart_client import Client, _json
from gitops_sync.render.charts import ChartLimits, ChartSpec, RepositoryAccess

log = get_logger(__name__)

# Flux's `flux push artifact` layer; a plain OCI image layer (`oras push … dir.tar.gz`) is taken too.
LAYER_MEDIA_TYPES = ("application/vnd.cncf.flux.content.v1.tar+gzip", "application/vnd.oci.image.layer.v1.tar+gzip")
_MANIFEST_MEDIA = "application/vnd.oci.image.manifest.v1+json"
_REF = re.compile(
    r"^oci://(?P<host>[^/]+)/(?P<name>[a-z0-9._/-]+?)(?::(?P<tag>[\w][\w.-]{0,127})|@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


@dataclass(frozen=True)
class ArtifactRef:
    host: str
    name: str  # the repository in the registry (`apps/manifests`)
    reference: str  # a tag, or sha256:<hex>

    @property
    def repository(self) -> str:
        """`oci://host/name`: what identifies the source (a new tag or digest is a new revision of it)."""
        return f"oci://{self.host}/{self.name}"


def parse(url: str) -> ArtifactRef:
    """`oci://host/name[:tag|@sha256:…]` (default tag `latest`); a SourceError-like RenderError otherwise."""
    m = _REF.match(url)
    if m is None:
        raise RenderError(
            "an OCI artifact is oci://<registry>/<repository>[:<tag>|@sha256:<digest>] (lower-case repository)",
            file=url,
        )
    return ArtifactRef(m["host"], m["name"], m["tag"] or m["digest"] or "latest")


class _ArtifactClient(Client):
    """The OCI chart client's HTTP (auth, token flow, trust, bounds), with artifact wording in errors."""

    def error(self, problem: str) -> RenderError:
        return RenderError(f"OCI artifact {self.label}: {problem}")


def pull(url: str, access: RepositoryAccess, cache: Path, limits: ChartLimits | None = None) -> tuple[Path, str]:
    """(the unpacked tree, the manifest digest) of the artifact `url` names now."""
    limits = limits or ChartLimits()
    ref = parse(url)
    parent, _, last = ref.name.rpartition("/")
    spec = ChartSpec(f"oci://{ref.host}/{parent}".rstrip("/"), last, "0.0.0", "artifact", None, (), {})
    client = _ArtifactClient(spec, access, url, limits)
    body, _ = client.get(f"{client._oci_base()}/manifests/{ref.reference}", _MANIFEST_MEDIA, 4 << 20)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    if ref.reference.startswith("sha256:") and ref.reference != digest:
        raise client.error(f"the registry answered a manifest of digest {digest}, not the {ref.reference} asked for")
    manifest = _json(body)
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    found = [la for la in layers or [] if isinstance(la, dict) and la.get("mediaType") in LAYER_MEDIA_TYPES]
    if len(found) != 1 or not re.fullmatch(r"sha256:[0-9a-f]{64}", str(found[0].get("digest"))):
        raise client.error(
            f"{ref.reference} is not an artifact of manifests (one layer of {' or '.join(LAYER_MEDIA_TYPES)})"
        )
    entry = cache / "artifacts" / digest.replace(":", "-")
    tree = entry / "tree"
    if tree.is_dir():
        log.info("artifact served from cache", artifact=ref.repository, reference=ref.reference, digest=digest)
        return tree, digest
    _fetch(client, found[0]["digest"], entry, limits)
    log.info("artifact pulled", artifact=ref.repository, reference=ref.reference, digest=digest)
    return tree, digest


def _fetch(client: _ArtifactClient, layer: str, entry: Path, limits: ChartLimits) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".pull-", dir=entry.parent))
    try:
        blob, _ = client.get(f"{client._oci_base()}/blobs/{layer}", "*/*", limits.max_archive_bytes)
        if "sha256:" + hashlib.sha256(blob).hexdigest() != layer:
            raise client.error(f"the layer's content does not have the digest {layer} its manifest names")
        archive = work / "layer.tar.gz"
        archive.write_bytes(blob)
        staged = work / "entry"
        (staged / "tree").mkdir(parents=True)
        unpack_tree(archive, staged / "tree", limits, client.error, what="the artifact's layer")
        archive.unlink()
        try:
            os.rename(staged, entry)
        except OSError:
            if not (entry / "tree").is_dir():  # not a concurrent pull of the same digest: a real failure
                raise
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(work)
