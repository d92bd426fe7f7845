"""The Memcpy estimate, the last phase of placement: what ORT's memcpy transformer inserts.

Rules, per graph, per value and direction:

- A value produced on CPU (a CPU node, or an EP CPU-output slot) and read by an EP node in
  a device slot costs one MemcpyFromHost; a value produced on the EP device and read by a
  CPU node or by an EP CPU-input slot (``Reshape``'s ``shape`` ...) costs one MemcpyToHost.
- Initializers cost nothing (copied at session start).
- Graph inputs cost a MemcpyFromHost only when read both in device and in host slots
  (otherwise the feed is copied by the session); graph outputs never cost one (fetches are
  copied by the session).
- Values a subgraph reads from its outer scope count as the subgraph's inputs.
- Each copy names the nodes on its host side (:attr:`Transfer.host_side`): the host
  readers of a value copied to the host, the host producer of one copied from it; an EP
  node's input or output the EP keeps in host memory is named with its slot
  (``Reshape (CPU input 1)``): such a copy exists with no node on the CPU.
- An EP whose traits say its tensors live in host memory
  (:attr:`~onnxscript_ep_passes.ep.traits.EpTraits.host_memory`) shares the CPU EP's
  memory: nothing is copied, so no Memcpy is predicted anywhere.
"""

from __future__ import annotations

__all__ = ["transfers"]

from onnxscript_ep_passes.ep.placement.graph import FlatScope
from onnxscript_ep_passes.ep.placement.results import Transfer
from onnxscript_ep_passes.ep.traits import EpTraits


def transfers(scope: FlatScope, traits: EpTraits) -> list[Transfer]:
    """The Memcpy nodes ORT inserts in one scope (module docstring)."""
    result: list[Transfer] = []
    if traits.host_memory:
        return result
    for val in scope.values:
        if val.kind == "initializer":
            continue
        device_reads = 0
        host_readers: list[tuple[str, str]] = []
        for node, slot in val.consumers:
            if not node.on_ep:
                host_readers.append((node.op_type, node.name))
            elif traits.input_on_cpu(node.domain, node.op_type, slot):
                host_readers.append((f"{node.op_type} (CPU input {slot})", node.name))
            else:
                device_reads += 1
        readers = tuple(dict.fromkeys(host_readers))
        if val.kind in ("input", "outer"):
            if device_reads and readers:
                result.append(
                    Transfer(val.name, "MemcpyFromHost", scope.name, val.ir_value, readers)
                )
            continue
        producer = val.producer
        assert producer is not None
        on_device = producer.on_ep and not traits.output_on_cpu(
            producer.domain, producer.op_type, val.producer_slot
        )
        if on_device and readers:
            result.append(Transfer(val.name, "MemcpyToHost", scope.name, val.ir_value, readers))
        elif not on_device and device_reads:
            label = producer.op_type
            if producer.on_ep:  # an output the EP leaves in host memory
                label = f"{label} (CPU output {val.producer_slot})"
            made = ((label, producer.name),)
            result.append(Transfer(val.name, "MemcpyFromHost", scope.name, val.ir_value, made))
    return result
