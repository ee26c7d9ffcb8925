"""One error class per HTTP status: what `Client` raises for each answer, and what each error keeps."""

from __future__ import annotations

import pytest

from gitops_sync import errors
from gitops_sync.errors import (
    ApiError,
    ClusterError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
    UnauthorizedError,
)
from tests.unit.fakes import FakeApi, fake_client, status_body

PATH = "/api/v1/namespaces/ns/configmaps/a"


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, ApiError),
        (401, UnauthorizedError),
        (403, ForbiddenError),
        (404, NotFoundError),
        (405, ApiError),
        (409, ConflictError),
        (410, GoneError),
        (422, InvalidError),
        (429, TooManyRequestsError),
        (500, ServerError),
        (503, ServerError),
    ],
)
def test_each_status_maps_to_its_class_and_all_are_api_errors(status: int, cls: type[ApiError]) -> None:
    exc = errors.error_for_status(status, "Reason", "what happened", method="GET", path=PATH)
    assert type(exc) is cls
    assert isinstance(exc, ApiError) and isinstance(exc, ClusterError) and isinstance(exc, errors.GitOpsError)
    assert exc.status == status and exc.path == PATH and exc.method == "GET"
    assert str(exc) == f"{status} Reason: what happened"


def test_the_client_raises_the_class_of_the_answer_keeping_path_and_status_body() -> None:
    causes = [{"reason": "FieldValueInvalid", "message": "Invalid value", "field": "data.x"}]
    body = {**status_body(422, "Invalid", 'ConfigMap "a" is invalid'), "details": {"causes": causes}}
    api = FakeApi().on("PATCH", PATH, (422, body))
    with pytest.raises(InvalidError) as info:
        fake_client(api).request("PATCH", PATH, body={}, content_type="application/merge-patch+json")
    exc = info.value
    assert exc.method == "PATCH" and exc.path == PATH and exc.reason == "Invalid"
    assert exc.body["details"] == {"causes": causes}
    assert str(exc) == '422 Invalid: ConfigMap "a" is invalid'


@pytest.mark.parametrize(
    ("status", "reason", "cls"),
    [(403, "Error", ForbiddenError), (404, "NotFound", NotFoundError), (409, "Conflict", ConflictError)],
)
def test_an_answer_without_a_status_body_keeps_the_old_default_reason(
    status: int, reason: str, cls: type[ApiError]
) -> None:
    api = FakeApi().on("GET", PATH, (status, None))
    with pytest.raises(cls) as info:
        fake_client(api).request("GET", PATH)
    assert info.value.reason == reason and str(info.value) == f"{status} {reason}: GET {PATH}"


def test_an_answer_of_plain_text_names_the_request() -> None:
    # The API server's mux answers an unserved path with text, no Status: the message alone named nothing.
    api = FakeApi().on("GET", PATH, (404, b"404 page not found\n"))
    with pytest.raises(NotFoundError) as info:
        fake_client(api).request("GET", PATH)
    assert str(info.value) == f"404 NotFound: GET {PATH}: 404 page not found"


def test_get_or_none_is_none_only_for_not_found() -> None:
    api = FakeApi().on("GET", PATH, (403, status_body(403, "Forbidden", "no")))
    client = fake_client(api)
    with pytest.raises(ForbiddenError):
        client.get_or_none(PATH)
    assert client.get_or_none("/api/v1/namespaces/ns/configmaps/absent") is None
