"""What a command knows so far (`Attempt`), for the report of its failure: the source, the commit, the
inventory, and the Secret values to mask. The group (`group.py`) finds it again when the command fails."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from gitops_sync.options import LogChoices

if TYPE_CHECKING:
    from gitops_sync.engine import SourceOptions
    from gitops_sync.plan.changeset import ChangeSet
    from gitops_sync.plan.masking import Redactor
    from gitops_sync.resource import DesiredObject
    from gitops_sync.source import Checkout


@dataclass
class Attempt:
    """What a command knows so far, for its failure: the error document and masking the message."""

    command: str
    output: str = "table"
    source: SourceOptions | None = None
    checkout: Checkout | None = None
    dry_run: bool = False
    rendered: bool = False  # the Secret values are known (registered with `redact`)
    redact: Redactor = field(default_factory=lambda: _new_redactor())
    inventory: tuple[str, str, str] = ("", "", "")  # name, namespace, source identity, once known
    logs: LogChoices = field(default_factory=LogChoices)

    def mask(self, text: str, *, ours: bool) -> str:
        """`ours`: a message we wrote (already masked by design); else any quoted literal is masked too
        while the Secret values it might hold are not known yet."""
        from gitops_sync.plan.masking import mask_literals
        from gitops_sync.source import mask_url

        text = mask_url(self.redact(text))
        return text if ours or self.rendered else mask_literals(text)

    def failed(self, message: str) -> ChangeSet:
        """The report of a pass that ended in `message`: what was known, `errors` filled."""
        from gitops_sync.engine import source_label
        from gitops_sync.plan.changeset import ChangeSet

        src, co = self.source, self.checkout
        label = source_label(src.repo, src.path, src.revision) if src else ""
        name, namespace, identity = self.inventory
        return ChangeSet(
            revision=co.revision if co else "",
            source=label,
            errors=[message],
            dry_run=self.dry_run,
            inventory=name,
            inventory_namespace=namespace,
            source_identity=identity,
        )


def _new_redactor() -> Redactor:
    """An empty Redactor; gitops_sync.plan.masking is imported once a command starts, not by `--version`."""
    from gitops_sync.plan.masking import Redactor

    return Redactor()


def start_attempt(command: str, **known: Any) -> Attempt:
    """The attempt of the command running now, found again by the group when the command fails."""
    attempt = Attempt(command, **known)
    click.get_current_context().meta[_ATTEMPT] = attempt
    return attempt


_ATTEMPT = "gitops_sync.attempt"


def current_attempt(ctx: click.Context) -> Attempt:
    found = ctx.meta.get(_ATTEMPT)
    return found if isinstance(found, Attempt) else Attempt(ctx.invoked_subcommand or "gitops-sync")


def load_source(attempt: Attempt, source: SourceOptions) -> tuple[Checkout, list[DesiredObject]]:
    """Fetch and render, then register the Secret values so that no later message can show them."""
    # A one-shot command keeps everything it renders and reads until it exits, and the cyclic collector's
    # full passes walk all of it again and again: with the default thresholds a plan of 20,000 objects
    # spent 4.3 CPU-s instead of 3.2 (5,000: 0.9 vs 0.8), the growth faster than linear. Our objects hold
    # no cycles worth collecting early, so the young generation is collected 140x less often.
    gc.set_threshold(100_000, 50, 100)
    from gitops_sync.engine import disk_render_cache, load

    # Before any cluster access: a broken source never touches the cluster.
    checkout, objects = load(source, disk_render_cache(source))
    attempt.checkout = checkout
    attempt.redact.add(o.manifest for o in objects)
    attempt.rendered = True
    return checkout, objects


def describe_unexpected(exc: BaseException) -> str:
    """`KeyError: 'x'`: an exception none of ours, in one line (its class and its message's first line)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return type(exc).__name__ + (f": {first}" if first else "")
