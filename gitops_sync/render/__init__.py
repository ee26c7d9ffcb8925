"""Manifests to objects: YAML/JSON files, kustomizations (`kubectl kustomize`) and charts (`helm template`)."""

from gitops_sync.render._render import RenderOptions, render, resolve_chart_sources
from gitops_sync.render._yaml import load_config, to_yaml
from gitops_sync.render.snapshot import Snapshot

__all__ = ["RenderOptions", "Snapshot", "load_config", "render", "resolve_chart_sources", "to_yaml"]
