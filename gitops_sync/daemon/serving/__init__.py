"""The daemon's HTTP side: probes, metrics, `/status`, the web page and the Git webhook.

It reads what the controllers publish and enqueues what webhooks ask for; it never runs a pass itself.
"""
