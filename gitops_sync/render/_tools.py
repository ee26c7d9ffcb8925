"""Run `kubectl kustomize` and `helm template`; their stdout is YAML for the common loader.

We call the tools the user already trusts instead of re-implementing kustomize or Go templates, so what
we apply is byte for byte what they would have applied by hand. Each run is bounded in time and in
output bytes (the process group is killed, so a plugin or `git` it started goes too), and its stderr is
redacted before it becomes part of a RenderError (which reaches reports, logs and the daemon's /status).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from gitops_sync.conventions import MASK
from gitops_sync.errors import RenderError
from gitops_sync.formatting import last_lines

_HOW_TO_GET = {
    "kubectl": "install kubectl (it bundles kustomize) and put it on PATH",
    "helm": "install Helm (v3 or later) and put it on PATH",
}
_STDERR_KEEP = 64 * 1024  # the tail of stderr kept for the message
# In a line that talks about secrets, literals or env files, whatever follows `=` may be a value.
_SENSITIVE_LINE = re.compile(r"secret|literal|env|password|token|key", re.IGNORECASE)
_ASSIGNED = re.compile(r"=[^\s,;:'\"\])}]+")


@dataclass(frozen=True)
class Limits:
    """What one tool run may take: seconds, and bytes on stdout."""

    timeout: float = 300
    max_output: int = 32 * 1024 * 1024


def kustomize(kubectl: str, directory: Path, label: str, limits: Limits, secrets: Collection[str] = ()) -> str:
    """`kubectl kustomize DIR`: the kustomization's output as multi-document YAML.

    `secrets`: values (secretGenerator literals, env and file contents) to mask in its error output.
    """
    return _run([kubectl, "kustomize", str(directory)], "kubectl", label, limits, secrets)


def helm_template(
    helm: str,
    directory: Path,
    release: str,
    namespace: str,
    values: Sequence[Path],
    label: str,
    limits: Limits,
) -> str:
    """`helm template`: CRDs included (we apply them), test hooks left out (they are not desired state)."""
    cmd = [helm, "template", release, str(directory), "--namespace", namespace, "--include-crds", "--skip-tests"]
    for path in values:
        cmd += ["--values", str(path)]
    return _run(cmd, "helm", label, limits, ())


def helm(helm: str, args: Sequence[str], label: str, limits: Limits, env: dict[str, str]) -> str:
    """Any other helm command (`helm pull` for charts.py), bounded alike, in the environment given (which
    points helm at private config files: credentials never reach its argv)."""
    return _run([helm, *args], "helm", label, limits, (), env)


def _run(
    cmd: list[str], tool: str, label: str, limits: Limits, secrets: Collection[str], env: dict[str, str] | None = None
) -> str:
    # No cwd change: a relative binary or PATH entry must mean what it means for the caller.
    # A session of its own: on timeout or too much output the whole group is killed, not just the tool.
    name = " ".join(cmd[:2])
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
    except FileNotFoundError:
        raise RenderError(f"`{cmd[0]}` not found, needed for {label}: {_HOW_TO_GET[tool]}") from None
    except PermissionError:
        raise RenderError(f"`{cmd[0]}` cannot be executed, needed for {label}: {_HOW_TO_GET[tool]}") from None
    try:
        out, err, problem = _collect(proc, limits)
    finally:
        if proc.poll() is None:
            _kill(proc)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the group (the tool itself has exited)
    if problem == "timeout":
        raise RenderError(f"`{name}` did not finish within {limits.timeout:g}s (stopped)", file=label)
    if problem == "output":
        raise RenderError(f"`{name}` printed more than the {limits.max_output}-byte output limit (stopped)", file=label)
    if proc.returncode != 0:
        text = redact(err.decode(errors="replace") or out[-_STDERR_KEEP:].decode(errors="replace"), secrets)
        raise RenderError(f"`{name}` failed (exit {proc.returncode}): {_tail(text)}", file=label)
    return out.decode(errors="replace")


def _collect(proc: subprocess.Popen[bytes], limits: Limits) -> tuple[bytes, bytes, str]:
    """Read stdout and stderr until both close and the process exits, the deadline passes ("timeout")
    or stdout grows past the limit ("output")."""
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + limits.timeout
    out = bytearray()
    err = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), "timeout"
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer: bytearray = key.data
                buffer += chunk
                if buffer is out and len(out) > limits.max_output:
                    return bytes(out), bytes(err), "output"
                if buffer is err and len(err) > 2 * _STDERR_KEEP:
                    del err[:-_STDERR_KEEP]
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return bytes(out), bytes(err), "timeout"
    return bytes(out), bytes(err), ""


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def redact(text: str, secrets: Collection[str]) -> str:
    """`text` with every known secret value (also as Go's %q would quote it) and, in lines about
    secrets, literals or env files, everything after `=` replaced by `***`."""
    for value in sorted({s for s in secrets if s.strip()}, key=len, reverse=True):
        for form in {value, json.dumps(value)[1:-1]}:
            if len(form) >= 4:
                text = text.replace(form, MASK)
            else:  # a short value: only where it stands alone, or every `a` in the text would go
                text = re.sub(rf"(?<![\w]){re.escape(form)}(?![\w])", MASK, text)
    return "\n".join(_ASSIGNED.sub("=" + MASK, ln) if _SENSITIVE_LINE.search(ln) else ln for ln in text.splitlines())


def _tail(text: str, lines: int = 10, chars: int = 2000) -> str:
    return "\n".join(last_lines(text.strip(), lines))[-chars:]
