"""Two real control planes side by side (`kube` and `second_kube`): each connection reaches its own cluster,
and tells which one it is.

The identity is the API server URL plus the `kube-system` namespace UID: two clusters differ in both, two
connections to one cluster (through different kubeconfigs, one of them given as bytes and untrusted) agree.
"""

from __future__ import annotations

import pytest

from gitops_sync.cluster.connection import ClusterConnection
from tests.conftest import SECOND_CLUSTER, KubeCluster

pytestmark = [pytest.mark.cluster, SECOND_CLUSTER]


def test_two_clusters_have_two_identities_and_each_connection_reads_its_own_once(
    kube: KubeCluster, second_kube: KubeCluster
) -> None:
    with ClusterConnection.open(kube.kubeconfig) as a, ClusterConnection.open(second_kube.kubeconfig) as b:
        ida, idb = a.identity(), b.identity()
        assert ida.uid and idb.uid and ida.uid != idb.uid
        assert ida.server != idb.server
        assert ida.uid == kube.get("namespace", "kube-system")["metadata"]["uid"]
        assert idb.uid == second_kube.get("namespace", "kube-system")["metadata"]["uid"]
        reads = a.client.stats.reads
        assert a.identity() is ida and a.client.stats.reads == reads  # read once
        assert b.breaker is not a.breaker and b.discovery is not a.discovery
    # The admin kubeconfig holds its certificates inline: as bytes, untrusted, it opens and agrees.
    with ClusterConnection.open(second_kube.kubeconfig.read_bytes(), trusted=False) as again:
        assert again.identity() == idb
        assert again.client.get("/version")["gitVersion"]
