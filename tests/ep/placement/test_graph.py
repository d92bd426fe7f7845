"""The flat graph's pieces (graph.py): a value's consumers keep the order a list of them
had, whatever is added and dropped."""

from __future__ import annotations

import random

import pytest

from onnxscript_ep_passes.ep.placement.graph import Consumers, FlatNode


def _node(index: int) -> FlatNode:
    return FlatNode(f"n{index}", "Relu", "", 14, [], [], "graph 'main'")


@pytest.mark.parametrize("seed", range(20))
def test_consumers_keep_the_order_of_a_list(seed: int) -> None:
    """Random appends and removals (each pair at most once present, as on a flat value)
    give the same sequence as a list given the same edits."""
    rng = random.Random(seed)
    nodes = [_node(i) for i in range(12)]
    as_list: list[tuple[FlatNode, int]] = []
    consumers = Consumers()
    for _ in range(300):
        use = (rng.choice(nodes), rng.randrange(3))
        if use in consumers:
            as_list.remove(use)
            consumers.remove(use)
        else:
            as_list.append(use)
            consumers.append(use)
        assert list(consumers) == as_list
        assert len(consumers) == len(as_list) and bool(consumers) == bool(as_list)
        if as_list:
            assert consumers.first() == as_list[0]


def test_a_use_not_there_cannot_be_removed() -> None:
    consumers = Consumers()
    consumers.append((_node(0), 0))
    with pytest.raises(KeyError):
        consumers.remove((_node(0), 0))  # another node: flat nodes compare by identity
