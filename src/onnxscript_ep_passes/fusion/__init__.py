"""Fusions into ONNX Runtime's fused (com.microsoft) kernels, applied where an EP has them.

- :mod:`~onnxscript_ep_passes.fusion.attention` -- torch's ai.onnx ``Attention`` (with
  rotary, repeat_kv and KV cache) -> ``GroupQueryAttention`` (the graph walk in
  :mod:`~onnxscript_ep_passes.fusion.attention_match`; its mask proven causal by
  :mod:`~onnxscript_ep_passes.fusion.mask_proof` over
  :mod:`~onnxscript_ep_passes.fusion.mask_terms` and
  :mod:`~onnxscript_ep_passes.fusion.mask_pieces` and
  :mod:`~onnxscript_ep_passes.fusion.mask_float`);
- :mod:`~onnxscript_ep_passes.fusion.multi_head` -- an encoder's bidirectional
  ``Attention`` (no mask, or padding only) -> ``MultiHeadAttention``;
- :mod:`~onnxscript_ep_passes.fusion.normalization` -- RMS normalizations ->
  ``SimplifiedLayerNormalization`` / ``SkipSimplifiedLayerNormalization``, a residual
  ``Add`` + ``LayerNormalization`` -> ``SkipLayerNormalization``;
- :mod:`~onnxscript_ep_passes.fusion.activation` -- the written-out tanh Gelu ->
  ``FastGelu``, bias + exact Gelu -> ``BiasGelu``;
- :mod:`~onnxscript_ep_passes.fusion.embedding` and
  :mod:`~onnxscript_ep_passes.fusion.positions` -- embedding lookups, position ids and
  token lookups off the host's int64 path (exact); the attention fusions read sizes
  where the graph has them (:mod:`~onnxscript_ep_passes.fusion.shape_dims`);
- :mod:`~onnxscript_ep_passes.fusion.evaluate` -- running parts of a model on generated
  inputs (the numeric checks);
- :mod:`~onnxscript_ep_passes.fusion.verify` -- running a fused candidate on the CPU EP
  and the target EP on padded, windowed and cached inputs, position by position;
- :mod:`~onnxscript_ep_passes.fusion.fuse_for_ep` -- :class:`FuseForEpPass`: each fusion
  gated by the EP's kernel table and verified by running the model;
- :mod:`~onnxscript_ep_passes.fusion.choice` -- choosing between the fused and the
  unfused model by measuring both on the EP (``optimize --measure``).
"""

from onnxscript_ep_passes.fusion.attention import AttentionFusionResult, fuse_attention_to_gqa
from onnxscript_ep_passes.fusion.fuse_for_ep import (
    FUSIONS,
    FuseForEpPass,
    FusionRecord,
    FusionResult,
    FusionSpec,
)

__all__ = [
    "FUSIONS",
    "AttentionFusionResult",
    "FuseForEpPass",
    "FusionRecord",
    "FusionResult",
    "FusionSpec",
    "fuse_attention_to_gqa",
]
