"""What the reconciler keeps of a node between evaluations: used again only for the same objects."""

from __future__ import annotations

import json

from colocation.apimachinery.merge_patch import json_merge_patch
from colocation.controllers.config import parse_config
from colocation.controllers.node_memo import NodeMemo
from colocation.controllers.nodewrite import node_status_patch

POOL_A = {"colocation-config": json.dumps({
    "clusterStrategy": {"cpuReclaimThresholdPercent": 60},
    "nodeStrategies": [{"name": "a", "nodeSelector": {"matchLabels": {"pool": "a"}},
                        "cpuReclaimThresholdPercent": 40}]})}
CPU = "kubernetes.io/batch-cpu"


def test_the_strategy_follows_a_new_label_set_override_or_configuration() -> None:
    memo, parsed, labels = NodeMemo(), parse_config(POOL_A), {"pool": "b"}
    first = memo.strategy_of(labels, None, parsed)
    assert first.cpu_reclaim_threshold_percent == 60
    assert memo.strategy_of(labels, None, parsed) is first  # the same objects: not derived again
    assert memo.strategy_of({"pool": "a"}, None, parsed).cpu_reclaim_threshold_percent == 40
    overridden = memo.strategy_of({"pool": "a"}, {"cpuReclaimThresholdPercent": 20}, parsed)
    assert overridden.cpu_reclaim_threshold_percent == 20
    assert memo.strategy_of({"pool": "a"}, None, parse_config(None)).cpu_reclaim_threshold_percent == 60
    assert memo.strategy_of(None, {"disableColocation": True}, parsed).enable is False


def test_what_the_node_offers_is_read_from_each_new_copy_of_it() -> None:
    memo = NodeMemo()
    node = {"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}}}
    assert memo.batch_on(node).values is None
    written = json_merge_patch(node, node_status_patch({CPU: 3500, "kubernetes.io/batch-memory": 2**30,
                                                        "kubernetes.io/mid-cpu": 0, "kubernetes.io/mid-memory": 0}))
    assert (memo.batch_on(written).values or {}).get(CPU) == 3500
    assert memo.batch_on(node).values is None  # an older copy delivered late is read as it is


def test_a_status_is_settled_only_over_the_same_stored_status_and_inputs() -> None:
    memo, stored = NodeMemo(), {"healthy": True}
    assert not memo.status_settled(stored, (True,))
    memo.settle_status(stored, (True,))
    assert memo.status_settled(stored, (True,))
    assert not memo.status_settled(stored, (False,))
    assert not memo.status_settled(dict(stored), (True,))  # written since: a new stored status
