"""giterrors.explain: one line a user can act on, from what git said. Pure; the messages are real git's."""

from __future__ import annotations

import pytest

from gitops_sync.source.giterrors import explain

URL = "http://127.0.0.1:40479/repo.git"  # a port holding "404" (ephemeral ports do: a test was flaky on one)


@pytest.mark.parametrize(
    ("stderr", "start"),
    [
        (f"fatal: Authentication failed for '{URL}/'", f"authentication failed for {URL} (host 127.0.0.1)"),
        (
            f"fatal: unable to access '{URL}/': The requested URL returned error: 403",
            f"authentication failed for {URL}",
        ),
        (f"fatal: repository '{URL}/' not found", f"no Git repository at {URL}"),
        (f"fatal: unable to access '{URL}/': The requested URL returned error: 404", f"no Git repository at {URL}"),
        (
            f"fatal: unable to access '{URL}/': Failed to connect to 127.0.0.1 port 40479: Connection refused",
            f"cannot reach 127.0.0.1 fetching {URL}: ",
        ),
    ],
)
def test_digits_of_a_port_are_no_status_code(stderr: str, start: str) -> None:
    assert explain(URL, stderr, 30).startswith(start)
