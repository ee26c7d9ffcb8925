"""`--repo oci://…` (render/artifact.py): the reference forms, and one source identity whatever the tag."""

from __future__ import annotations

import pytest

from gitops_sync.engine import source_label
from gitops_sync.errors import RenderError
from gitops_sync.render import artifact
from gitops_sync.source import identify

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("url", "name", "reference"),
    [
        ("oci://r.example:5000/apps/manifests:v1.2", "apps/manifests", "v1.2"),
        ("oci://r.example/apps", "apps", "latest"),
        (f"oci://r.example/apps/x@{DIGEST}", "apps/x", DIGEST),
    ],
)
def test_references(url: str, name: str, reference: str) -> None:
    ref = artifact.parse(url)
    assert (ref.name, ref.reference) == (name, reference)
    assert ref.repository == f"oci://{url.removeprefix('oci://').split('/')[0]}/{name}"


@pytest.mark.parametrize(
    "url", ["oci://r.example", "oci://r.example/Apps:v1", "oci://r.example/a@sha256:12", "oci://r/a:"]
)
def test_malformed_references_are_refused(url: str) -> None:
    with pytest.raises(RenderError, match="oci://<registry>/<repository>"):
        artifact.parse(url)


def test_the_identity_and_label_of_an_artifact_source() -> None:
    one, two = identify("oci://R.example/apps/x:v1", None), identify(f"oci://r.example/apps/x@{DIGEST}", None)
    assert one == two and one.text == "oci://r.example/apps/x"
    assert source_label("oci://r.example/apps/x:v1", "prod") == "oci://r.example/apps/x:v1//prod"
