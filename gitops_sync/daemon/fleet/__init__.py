"""`gitops-sync run` without --repo: a controller for every GitSync object it can see, in shards.

`gitsync.py` is the custom resource's model (all `fleetctl.py` imports); `status.py` its status document.
`controller.py` wires the parts: `watch.py` (GitSyncs), `registry.py`, `sources.py` (with `credentials.py`:
spec.secretRef), `scheduler.py`, `poller.py`, `finalizer.py`, `writer.py`, `shards.py`, `documents.py`
(docs/architecture.md).
"""
