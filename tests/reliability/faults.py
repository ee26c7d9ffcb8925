"""Fault injection on a private local control plane: stop, freeze (SIGSTOP), thaw and restart components.

Only for a cluster the test started itself (`private_cluster` fixture): the shared one serves other tests.
The launcher's own functions start a component again, so it comes back with exactly its original flags.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.daemon_support import _launcher, wait_until


@dataclass
class PrivateCluster:
    """A cluster started for one test module; `env` has KUBECONFIG and PATH (kubectl, helm) set."""

    state_dir: Path
    env: dict[str, str]

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    def _cfg(self) -> Any:
        lc = _launcher()
        args = argparse.Namespace(
            dir=str(self.state_dir), cache_dir=os.environ.get("LOCAL_CLUSTER_CACHE"), timeout=90.0, command="fault"
        )
        return lc.running_config(lc.make_config(args))

    def _procs(self, name: str) -> list[Any]:
        procs = [p for p in _launcher().read_pids(self._cfg()) if p.name == name]
        assert procs, f"no {name} pid recorded in {self.state_dir}"
        return procs

    def stop(self, name: str) -> None:
        """SIGTERM (then SIGKILL) the component: connections are refused until `start`."""
        _launcher().stop_together(self._procs(name), 15.0)

    def kill(self, name: str) -> None:
        """SIGKILL the component: no graceful shutdown."""
        for p in self._procs(name):
            os.kill(p.pid, signal.SIGKILL)
        time.sleep(0.2)

    def freeze(self, name: str) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing (a hung server)."""
        for p in self._procs(name):
            os.kill(p.pid, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        for p in self._procs(name):
            os.kill(p.pid, signal.SIGCONT)

    def start(self, name: str, ready_timeout: float = 90) -> None:
        """Start the component again and wait until the API server answers /readyz."""
        lc = _launcher()
        cfg = self._cfg()
        lc.start(cfg, name)
        api = lc.Api(cfg)
        wait_until(f"/readyz after starting {name}", lambda: api.ok("/readyz"), ready_timeout, 0.2)

    def restart(self, name: str, down_for: float = 0.0) -> None:
        self.stop(name)
        time.sleep(down_for)
        self.start(name)
