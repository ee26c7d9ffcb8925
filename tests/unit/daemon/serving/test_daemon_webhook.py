"""Webhook authentication: GitHub HMAC-SHA256 signatures and GitLab tokens; secret loading."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from gitops_sync.daemon.reconcile.triggers import Ticker, load_webhook_secret, verify_webhook
from gitops_sync.errors import GitOpsError

SECRET = b"It's a Secret to Everybody"
BODY = b"Hello, World!"
# The example from GitHub's documentation ("Validating webhook deliveries").
GITHUB_EXAMPLE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_github_documentation_example_verifies() -> None:
    r = verify_webhook({"X-Hub-Signature-256": GITHUB_EXAMPLE}, BODY, SECRET)
    assert (r.ok, r.status, r.provider) == (True, 202, "github")


def test_github_signature_is_checked_against_the_exact_body() -> None:
    r = verify_webhook({"x-hub-signature-256": GITHUB_EXAMPLE}, BODY + b" ", SECRET)
    assert (r.ok, r.status, r.reason) == (False, 401, "signature mismatch")
    sig = "sha256=" + hmac.new(b"other", BODY, hashlib.sha256).hexdigest()
    assert not verify_webhook({"X-Hub-Signature-256": sig}, BODY, SECRET).ok


def test_malformed_or_sha1_signatures_are_refused() -> None:
    for value in ("757107ea", "sha1=757107ea0eb2509fc211221cce984b8a37570b6d", "sha256="):
        r = verify_webhook({"X-Hub-Signature-256": value}, BODY, SECRET)
        assert not r.ok and r.status == 401


def test_gitlab_token() -> None:
    assert verify_webhook({"X-Gitlab-Token": SECRET.decode()}, BODY, SECRET).ok
    r = verify_webhook({"X-Gitlab-Token": "nope"}, BODY, SECRET)
    assert (r.ok, r.status, r.provider) == (False, 401, "gitlab")


def test_unsigned_requests_are_refused_and_no_secret_means_disabled() -> None:
    assert verify_webhook({}, BODY, SECRET).status == 401
    r = verify_webhook({"X-Hub-Signature-256": GITHUB_EXAMPLE}, BODY, None)
    assert (r.ok, r.status) == (False, 404)
    assert "no secret" in r.reason


def test_secret_from_file_or_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "secret"
    f.write_text("s3cret\n")
    assert load_webhook_secret(f) == b"s3cret"
    monkeypatch.setenv("GITOPS_SYNC_WEBHOOK_SECRET", "from-env")
    assert load_webhook_secret(None) == b"from-env"
    monkeypatch.delenv("GITOPS_SYNC_WEBHOOK_SECRET")
    assert load_webhook_secret(None) is None
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(GitOpsError, match="empty"):
        load_webhook_secret(empty)
    with pytest.raises(GitOpsError, match="cannot read"):
        load_webhook_secret(tmp_path / "missing")


def test_poll_jitter_spreads_around_the_interval() -> None:
    lo = Ticker("t", 60, lambda: None, jitter=0.1, rand=lambda: 0.0)
    hi = Ticker("t", 60, lambda: None, jitter=0.1, rand=lambda: 1.0)
    assert lo.next_delay() == pytest.approx(54) and hi.next_delay() == pytest.approx(66)


def test_non_ascii_signatures_and_tokens_are_a_mismatch_not_an_error() -> None:
    """Header values are latin-1 text that may hold anything; compare_digest raised on non-ASCII str."""
    for headers in (
        {"X-Hub-Signature-256": "sha256=é"},
        {"X-Hub-Signature-256": GITHUB_EXAMPLE + "\u00ff"},
        {"X-Gitlab-Token": "é"},
        {"X-Gitlab-Token": "\udcff"},
    ):
        r = verify_webhook(headers, BODY, SECRET)
        assert (r.ok, r.status) == (False, 401), headers
