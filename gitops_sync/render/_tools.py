"""Run `kubectl kustomize` and `helm template`; their stdout is YAML for the common loader.

We call the tools the user already trusts instead of re-implementing kustomize or Go templates, so what
we apply is byte for byte what they would have applied by hand.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from gitops_sync.errors import RenderError

_HOW_TO_GET = {
    "kubectl": "install kubectl (it bundles kustomize) and put it on PATH",
    "helm": "install Helm (v3 or later) and put it on PATH",
}


def kustomize(kubectl: str, directory: Path, label: str, timeout: float) -> str:
    """`kubectl kustomize DIR`: the kustomization's output as multi-document YAML."""
    return _run([kubectl, "kustomize", str(directory)], "kubectl", label, timeout)


def helm_template(
    helm: str,
    directory: Path,
    release: str,
    namespace: str,
    values: Sequence[Path],
    label: str,
    timeout: float,
) -> str:
    """`helm template`: CRDs included (we apply them), test hooks left out (they are not desired state)."""
    cmd = [helm, "template", release, str(directory), "--namespace", namespace, "--include-crds", "--skip-tests"]
    for path in values:
        cmd += ["--values", str(path)]
    return _run(cmd, "helm", label, timeout)


def _run(cmd: list[str], tool: str, label: str, timeout: float) -> str:
    # No cwd change: a relative binary or PATH entry must mean what it means for the caller.
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise RenderError(f"`{cmd[0]}` not found, needed for {label}: {_HOW_TO_GET[tool]}") from None
    except PermissionError:
        raise RenderError(f"`{cmd[0]}` cannot be executed, needed for {label}: {_HOW_TO_GET[tool]}") from None
    except subprocess.TimeoutExpired:
        raise RenderError(f"`{' '.join(cmd[:2])}` did not finish within {timeout:g}s", file=label) from None
    if done.returncode != 0:
        raise RenderError(
            f"`{' '.join(cmd[:2])}` failed (exit {done.returncode}): {_tail(done.stderr or done.stdout)}",
            file=label,
        )
    return done.stdout


def _tail(text: str, lines: int = 10, chars: int = 2000) -> str:
    kept = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])[-chars:]
