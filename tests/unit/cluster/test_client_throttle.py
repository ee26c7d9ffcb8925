"""A 429 with Retry-After is retried as client-go does, within the request's timeout and the deadline.

The real API Priority and Fairness rejections are in tests/reliability/test_apf_throttling.py; here the
decisions: what is retried, how long it waits, what bounds it, and that the breaker never hears of it.
"""

from __future__ import annotations

import time

import pytest

from gitops_sync.cluster.client import MAX_RETRIES, throttle_wait
from gitops_sync.errors import TooManyRequestsError
from tests.unit.fakes import FakeApi, fake_client, status_body

CM = "/api/v1/namespaces/ns/configmaps/a"
THROTTLED = (
    429,
    status_body(429, "TooManyRequests", "Too many requests, please try again later."),
    {"Retry-After": "1"},
)


@pytest.mark.parametrize(
    ("status", "retry_after", "retries", "low", "high"),
    [
        (429, "1", 0, 1.0, 1.5),
        (429, " 2 ", 3, 2.0, 3.0),
        (429, "0", 0, 0.0, 0.1),
    ],
)
def test_a_429_with_integer_retry_after_waits_at_least_that_long(
    status: int, retry_after: str, retries: int, low: float, high: float
) -> None:
    waits = [throttle_wait(status, retry_after, retries, MAX_RETRIES) for _ in range(200)]
    assert all(w is not None and low <= w <= high for w in waits), waits
    assert len(set(waits)) > 1  # spread, so requests throttled together do not return together


@pytest.mark.parametrize(
    ("status", "retry_after", "retries"),
    [
        (429, None, 0),  # client-go: no Retry-After, no retry (a PDB eviction refusal is a 429 like that)
        (429, "Wed, 21 Oct 2015 07:28:00 GMT", 0),
        (429, "soon", 0),
        (429, "-1", 0),
        (429, "1", MAX_RETRIES),
        (503, "1", 0),  # may have been processed
        (500, "1", 0),
        (409, "1", 0),
    ],
)
def test_anything_else_is_not_retried(status: int, retry_after: str | None, retries: int) -> None:
    assert throttle_wait(status, retry_after, retries, MAX_RETRIES) is None


def test_a_throttled_write_is_sent_again_until_it_goes_through_without_tripping_the_breaker() -> None:
    api = FakeApi().on("PATCH", CM, THROTTLED, THROTTLED, THROTTLED, {"metadata": {"name": "a"}})
    slept: list[float] = []
    client = fake_client(api, sleep=slept.append)
    status, doc = client.request_status("PATCH", CM, body={"data": {}})
    assert (status, doc["metadata"]["name"]) == (200, "a")
    assert len(api.sent("PATCH")) == 4 and len(slept) == 3 and all(1.0 <= s <= 1.5 for s in slept)
    assert (client.stats.writes, client.stats.throttled) == (1, 3)
    assert not client.breaker.is_down and client.breaker.trips == 0


def test_a_429_without_retry_after_is_raised_at_once() -> None:
    api = FakeApi().on("PATCH", CM, (429, status_body(429, "TooManyRequests", "no")))
    slept: list[float] = []
    client = fake_client(api, sleep=slept.append)
    with pytest.raises(TooManyRequestsError) as err:
        client.request("PATCH", CM, body={})
    assert "retried" not in str(err.value) and not slept and len(api.sent()) == 1


def test_retries_stop_after_max_retries_and_the_429_is_raised_as_it_came() -> None:
    api = FakeApi().on("GET", CM, THROTTLED)
    client = fake_client(api, sleep=lambda _: None)
    with pytest.raises(
        TooManyRequestsError, match=r"Too many requests, please try again later\. \(retried 10x over "
    ) as err:
        client.get(CM)
    assert err.value.status == 429 and err.value.path == CM
    assert len(api.sent()) == 1 + MAX_RETRIES and client.stats.throttled == MAX_RETRIES
    assert not client.breaker.is_down


def test_retries_fit_in_the_request_timeout() -> None:
    """timeout 3 s, Retry-After 1: one retry (1-1.5 s, leaving a second for it), not a second one."""
    api = FakeApi().on("GET", CM, THROTTLED)
    client = fake_client(api, timeout=3.0)
    t0 = time.monotonic()
    with pytest.raises(TooManyRequestsError, match="retried 1x"):
        client.get(CM)
    assert time.monotonic() - t0 < 3.0 and len(api.sent()) == 2


def test_a_retry_after_beyond_the_deadline_is_not_waited_for() -> None:
    api = FakeApi().on("GET", CM, (*THROTTLED[:2], {"Retry-After": "5"}))
    slept: list[float] = []
    client = fake_client(api, sleep=slept.append)
    client.set_deadline(3.0)
    with pytest.raises(TooManyRequestsError):  # the server's answer, not "the deadline passed"
        client.get(CM)
    assert not slept and len(api.sent()) == 1


def test_a_throttled_readyz_probe_means_the_server_is_up() -> None:
    client = fake_client(FakeApi().on("GET", "/readyz", THROTTLED))
    assert client.probe() is None
