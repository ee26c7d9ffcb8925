"""`gitops-sync run` and the fleet's client commands: the level-triggered daemon around the engine's pass.

Sub-packages, lowest first (tests/unit/test_layering.py enforces the order):

- `runtime/`: what any controller needs and that knows nothing about Git: the work queue, the watch cache,
  Events, metrics, token review, the supervisor of background threads.
- `reconcile/`: one source as an object the controller owns: desired state, passes, history, yields,
  tenant access, what a pass tells people.
- `serving/`: the HTTP endpoints (probes, metrics, `/status`, the page, the Git webhook).
- `single/` (`run --repo`) and `fleet/` (GitSync objects): the two controllers; they never import each other.
- `command.py` (`run`) and `fleetctl.py` (`get`/`reconcile`/`suspend`/`resume`) on top.

Nothing is imported here: `gitops-sync get` must not pay for the server libraries `run` needs.
"""
