"""onnx's full check of a large model, its two halves run at once (issue 23).

``onnx.checker.check_model(model, full_check=True)`` runs, one after the other, onnx's
structural checks (``check_model`` without ``full_check``) and then strict type and
shape inference with type checks and no data propagation (``infer_shapes(check_type=True,
strict_mode=True)``), on a copy of the model, against the same registry of schemas: one
changes nothing and the other changes only its copy, so neither can affect the other's
answer. Both hold the GIL, so a thread cannot overlap them. Rules (:func:`full_check`):

1. The model is checked here by ``check_model(full_check=True)`` when it is smaller than
   :data:`SPLIT_BYTES` serialized (a fork costs more than it saves), when
   :func:`~onnxscript_ep_passes.core.forked.can_fork` says no, or when the fork fails.
2. Otherwise the structural checks run in a forked child
   (:class:`~onnxscript_ep_passes.core.forked.Child`, which reads the model's bytes where
   they are) while this process runs the inference, the longer half. The answer is the
   full check's: the structural checks' error when they fail, raised as the same
   exception type with the same message, else the inference's, else none. (The full check
   infers only once the structural checks pass; here the inference also runs on a model
   they refuse, and its answer is dropped.)
3. A child that ends without an answer fails the check
   (:class:`~onnxscript_ep_passes.core.forked.ChildFailedError`, naming how it ended).

Measured in the command line on benchmarks/make_decoder.py's 40k-node decoder lowered
to opset 22 (242k nodes, 27 MB serialized): the full check 2.8-3.4 s; split, the
structural checks 0.65 s in the child while the inference takes 1.2-1.5 s here.
"""

from __future__ import annotations

__all__ = ["SPLIT_BYTES", "full_check"]

import onnx
import onnx.checker
from onnx.onnx_cpp2py_export import shape_inference as _c_inference

from onnxscript_ep_passes.core.forked import Child, can_fork

SPLIT_BYTES = 4 << 20
"""The smallest serialized model whose full check is split (module rule 1)."""

_PASSED = b""


def full_check(model: onnx.ModelProto | bytes) -> None:
    """Raise what ``onnx.checker.check_model(model, full_check=True)`` raises (module
    rules); return None when the model passes."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    if len(data) < SPLIT_BYTES or not can_fork():
        onnx.checker.check_model(data, full_check=True)
        return
    try:
        child = Child(lambda: _structural(data))
    except OSError:  # no fork here (memory, limits): one after the other
        onnx.checker.check_model(data, full_check=True)
        return
    with child:
        inferred: Exception | None = None
        try:
            _c_inference.infer_shapes(data, True, True, False)  # the full check's options
        except Exception as error:  # InferenceError: the structural one comes first
            inferred = error
        structural = child.answer()
    if structural != _PASSED:
        raise onnx.checker.ValidationError(structural.decode("utf-8", "replace"))
    if inferred is not None:
        raise inferred


def _structural(data: bytes) -> bytes:
    """The full check's structural half: empty when it passes, else its message."""
    try:
        onnx.checker.check_model(data, full_check=False)
    except Exception as error:  # ValidationError, as the full check raises it
        return str(error).encode("utf-8", "replace") or b"ValidationError"
    return _PASSED
