"""`gitops-sync run` without --repo: a controller for every GitSync object it can see, in shards.

`gitsync.py` is the custom resource's model (also read by `fleetctl.py`); `controller.py` the controller.
"""
