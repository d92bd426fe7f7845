"""Predict where ONNX Runtime will place each node of a model on an EP, without a session.

:func:`predict_placement` replays what ORT does when it creates a session, from a
:class:`~onnxscript_ep_passes.ep.kernel_table.KernelTable` and the EP's
:class:`~onnxscript_ep_passes.ep.traits.EpTraits`. One module per phase, in ORT's order;
each states its rules:

1. :mod:`.flatten` -- graph loading: Constants become initializers, model-local functions
   and schema bodies ORT inlines are inlined, subgraphs become scopes of their own;
2. :mod:`.kernels` -- kernel lookup by the since_version of the node's schema and its
   types; then :mod:`.basic_optimizations` -- what ORT folds, merges and eliminates before
   partitioning, at the session's optimization level (ORT's default: it does);
3. :mod:`.cpu_preference` -- ORT's CPU preference for small shape computations (CUDA);
4. :mod:`.layout` -- the Transposes of the NHWC layout transformation (WebGPU);
5. :mod:`.memcpy` -- the Memcpy nodes ORT's memcpy transformer inserts.

:mod:`.predict` runs them; :mod:`.results` holds what they find, each record pointing at
the model's IR node. Placement is predicted for the graph ORT partitions at the session's
optimization level (:class:`.OptimizationLevel`; default ORT's default, ``ENABLE_ALL``);
``DISABLE_ALL`` predicts the graph as written
(:func:`~onnxscript_ep_passes.ep.sessions.measure_placement`'s default). The measured
behaviour these rules reproduce is in ``tests/ep`` (WebGPU plugin on lavapipe).
"""

from onnxscript_ep_passes.ep.placement.predict import predict_placement
from onnxscript_ep_passes.ep.placement.results import (
    SHAPE_COMPUTATION_REASON,
    NodePlacement,
    OptimizationLevel,
    Placement,
    PlacementPrediction,
    ReasonCode,
    RemovedNode,
    Transfer,
)

__all__ = [
    "SHAPE_COMPUTATION_REASON",
    "NodePlacement",
    "OptimizationLevel",
    "Placement",
    "PlacementPrediction",
    "ReasonCode",
    "RemovedNode",
    "Transfer",
    "predict_placement",
]
