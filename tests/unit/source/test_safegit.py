"""safegit's environment wins over what a repository configures: its command-running keys read harmless
values and no transport is allowed, whatever `protocol.*.allow` the repository sets. Real git."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gitops_sync.source.safegit import SAFE_CONFIG, safe_env


def _repo(tmp_path: Path, config: str) -> Path:
    top = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    with (top / ".git" / "config").open("a") as f:
        f.write(config)
    return top


@pytest.mark.parametrize("key", [k for k, _ in SAFE_CONFIG])
def test_each_key_reads_our_value_over_the_repository_s(tmp_path: Path, key: str) -> None:
    section, _, name = key.rpartition(".")
    if "." in section:
        head, _, sub = section.partition(".")
        block = f'[{head} "{sub}"]\n\t{name} = /tmp/evil\n'
    else:
        block = f"[{section}]\n\t{name} = /tmp/evil\n"
    top = _repo(tmp_path, block)
    env = {**os.environ, **safe_env()}
    done = subprocess.run(["git", "-C", str(top), "config", "--get", key], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == dict(SAFE_CONFIG)[key]


def test_no_transport_runs_whatever_protocol_the_repository_allows(tmp_path: Path) -> None:
    """An `ext::` URL runs a command; a repository allowing it (protocol.ext.allow) must not get it run."""
    marker = tmp_path / "marker"
    top = _repo(tmp_path, '[protocol]\n\tallow = always\n[protocol "ext"]\n\tallow = always\n')
    url = f"ext::sh -c touch% {marker}"
    env = {**os.environ, **safe_env()}
    done = subprocess.run(["git", "-C", str(top), "fetch", url], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "not allowed" in done.stderr
    assert not marker.exists()
    # the same without our environment does run it (the test can fail)
    subprocess.run(["git", "-C", str(top), "fetch", url], capture_output=True, check=False)
    assert marker.exists()
