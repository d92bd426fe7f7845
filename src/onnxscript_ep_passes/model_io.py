"""Loading and saving models without holding their weights in memory twice.

Rules:

* Models are loaded with onnx-ir, whose external-data tensors stay memory-mapped.
* A model is saved with external data when its source had external data or when its
  initializers are too large for one protobuf (2 GB); the data file is named after the
  output (``OUT.onnx.data``), next to it. Tensors stream from the source file to the
  new one; the source is never overwritten while it is mapped.
"""

from __future__ import annotations

__all__ = ["has_external_data", "load_model", "save_model"]

import logging
import os
from pathlib import Path

import onnx_ir as ir

logger = logging.getLogger(__name__)

_PROTOBUF_LIMIT = 2**31 - 1
_INLINE_WEIGHTS_LIMIT = 1_800_000_000  # leave room for the graph itself


def load_model(path: str | os.PathLike[str]) -> ir.Model:
    """Load ``path`` with its external data mapped lazily."""
    return ir.load(path)


def _tensors(model: ir.Model) -> list[ir.TensorProtocol]:
    tensors: list[ir.TensorProtocol] = []
    for graph in (model.graph, *model.graph.subgraphs()):
        tensors.extend(v.const_value for v in graph.initializers.values() if v.const_value)
    return tensors


def has_external_data(model: ir.Model) -> bool:
    return any(isinstance(t, ir.ExternalTensor) for t in _tensors(model))


def save_model(
    model: ir.Model,
    path: str | os.PathLike[str],
    *,
    external_data: bool | None = None,
) -> None:
    """Save ``model`` to ``path``; with external data when needed (see module docstring)."""
    out = Path(path)
    if external_data is None:
        weight_bytes = sum(t.nbytes for t in _tensors(model))
        external_data = has_external_data(model) or weight_bytes > _INLINE_WEIGHTS_LIMIT
    if not external_data:
        ir.save(model, out)
        return
    data_name = out.name + ".data"
    for tensor in _tensors(model):
        if isinstance(tensor, ir.ExternalTensor):
            source = Path(tensor.base_dir) / tensor.location
            if source.resolve() == (out.parent / data_name).resolve():
                raise ValueError(
                    f"refusing to overwrite '{source}', which holds the weights being saved; "
                    "choose another output path"
                )
    logger.debug("saving %s with external data %s", out, data_name)
    ir.save(model, out, external_data=data_name)
