"""Normalizations -> ORT's (Skip)SimplifiedLayerNormalization / SkipLayerNormalization.

- :func:`rms_to_simplified`: ai.onnx ``RMSNormalization`` (opset 23, what torch emits for
  ``F.rms_norm`` at opset 23) over the last axis -> ``SimplifiedLayerNormalization`` (ORT's
  contrib op in the default domain) with the same epsilon and stash type: the same
  function, in the form onnxscript's skip fusion matches. Other axes are left alone.
- :func:`fuse_rms`: onnxscript's ``fuse_rms_normalization`` (the Pow/ReduceMean/Sqrt/...
  form torch emits at opsets 24+ -> ``SimplifiedLayerNormalization``).
- :func:`fuse_skip_rms`: onnxscript's ``fuse_skip_rms_normalization``
  (``Add`` + ``SimplifiedLayerNormalization`` -> com.microsoft
  ``SkipSimplifiedLayerNormalization``).
- :func:`fuse_skip_layer_norm`: onnxscript's ``fuse_skip_layer_normalization``
  (``Add`` of a residual [and a bias] + last-axis ``LayerNormalization`` with float stash
  -> com.microsoft ``SkipLayerNormalization``, whose fourth output is the sum the residual
  path reads on).

Each returns the number of nodes it created and changes the model in place.
"""

from __future__ import annotations

__all__ = ["fuse_rms", "fuse_skip_layer_norm", "fuse_skip_rms", "rms_to_simplified"]

import onnx_ir as ir
from onnxscript.rewriter.ort_fusions.rms_normalization import fuse_rms_normalization
from onnxscript.rewriter.ort_fusions.skip_normalization import (
    fuse_skip_layer_normalization,
    fuse_skip_rms_normalization,
)

from onnxscript_ep_passes.core.onnx_utils import is_onnx_op


def rms_to_simplified(model: ir.Model) -> int:
    """Rewrite last-axis ai.onnx RMSNormalization nodes of the main graph (see module doc)."""
    count = 0
    for node in list(model.graph):
        if not is_onnx_op(node, "RMSNormalization"):
            continue
        x = node.inputs[0]
        rank = None if x is None or x.shape is None else len(x.shape)
        axis = node.attributes.get_int("axis", -1)
        if axis != -1 and (rank is None or axis != rank - 1):
            continue
        if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
            continue
        attrs = {
            "axis": -1,
            "epsilon": node.attributes.get_float("epsilon", 1e-5),
            "stash_type": node.attributes.get_int("stash_type", 1),
        }
        new = ir.node("SimplifiedLayerNormalization", list(node.inputs[:2]), attributes=attrs)
        new.name = node.name
        ir.convenience.replace_nodes_and_values(
            model.graph, node, [node], [new], node.outputs[:1], new.outputs
        )
        count += 1
    return count


def fuse_rms(model: ir.Model) -> int:
    """onnxscript's RMS normalization fusion (to SimplifiedLayerNormalization)."""
    return int(fuse_rms_normalization(model))


def fuse_skip_rms(model: ir.Model) -> int:
    """onnxscript's skip + RMS normalization fusion (to SkipSimplifiedLayerNormalization)."""
    return int(fuse_skip_rms_normalization(model))


def fuse_skip_layer_norm(model: ir.Model) -> int:
    """onnxscript's skip + layer normalization fusion (to SkipLayerNormalization)."""
    return int(fuse_skip_layer_normalization(model))
