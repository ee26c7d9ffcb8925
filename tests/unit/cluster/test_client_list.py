"""`Client.list_collection` against recorded pages: limit/continue, selector, metadata-only, resourceVersion.

The real server's paging is exercised by every integration test that lists (prune, the watch cache).
"""

from __future__ import annotations

from typing import Any

import pytest

from gitops_sync.errors import GoneError
from tests.unit.fakes import FakeApi, fake_client, status_body

PATH = "/api/v1/namespaces/ns/configmaps"


def page(names: list[str], cont: str = "", rv: str = "7") -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return {"kind": "ConfigMapList", "metadata": meta, "items": [{"metadata": {"name": n}} for n in names]}


def test_pages_are_followed_until_the_server_sends_no_continue() -> None:
    api = FakeApi().on("GET", PATH, page(["a", "b"], "t1", "5"), page(["c"], "t2", "6"), page(["d"], rv="9"))
    listing = fake_client(api).list_collection(PATH, label_selector="app=x", limit=2)
    assert [i["metadata"]["name"] for i in listing.items] == ["a", "b", "c", "d"]
    assert listing.resource_version == "9" and not listing.more
    queries = [c.query for c in api.sent()]
    assert queries == [
        {"labelSelector": "app=x", "limit": "2"},
        {"labelSelector": "app=x", "limit": "2", "continue": "t1"},
        {"labelSelector": "app=x", "limit": "2", "continue": "t2"},
    ]


def test_pages_limit_stops_early_and_says_there_is_more() -> None:
    api = FakeApi().on("GET", PATH, page(["a"], "t1"), page(["b"]))
    listing = fake_client(api).list_collection(PATH, limit=1, pages=1)
    assert [i["metadata"]["name"] for i in listing.items] == ["a"] and listing.more
    assert len(api.sent()) == 1


def test_items_get_api_version_and_kind_and_keep_their_own() -> None:
    doc = page(["a"])
    doc["items"].append({"apiVersion": "v2", "kind": "Other", "metadata": {"name": "b"}})
    api = FakeApi().on("GET", PATH, doc)
    items = fake_client(api).list_collection(PATH, api_version="v1", kind="ConfigMap").items
    assert [(i["apiVersion"], i["kind"]) for i in items] == [("v1", "ConfigMap"), ("v2", "Other")]


def test_metadata_only_accept_header_is_sent_on_every_page() -> None:
    accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
    api = FakeApi().on("GET", PATH, page(["a"], "t1"), page(["b"]))
    fake_client(api).list_collection(PATH, accept=accept)
    assert [c.headers["Accept"] for c in api.sent()] == [accept, accept]


def test_an_empty_collection_is_an_empty_listing() -> None:
    api = FakeApi().on("GET", PATH, {"kind": "ConfigMapList", "metadata": {"resourceVersion": "3"}, "items": None})
    listing = fake_client(api).list_collection(PATH)
    assert listing.items == [] and listing.resource_version == "3" and not listing.more


def test_an_expired_continue_token_raises_gone_naming_the_request() -> None:
    expired = (410, status_body(410, "Expired", "The provided continue parameter is too old"))
    api = FakeApi().on("GET", PATH, page(["a"], "t1"), expired)
    with pytest.raises(GoneError) as info:
        fake_client(api).list_collection(PATH)
    assert info.value.status == 410 and info.value.path == PATH and info.value.method == "GET"
    assert "too old" in str(info.value)
