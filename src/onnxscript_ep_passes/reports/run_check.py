"""Does the model as given really run? And which candidate of the lowering repairs it?

A prediction says where nodes land; it cannot say that ORT runs the model. Some exports do
not run as written (torch 2.13's opset-23 exports with ``RotaryEmbedding-23`` fail on ORT's
CPU EP for a batch above 1: "Inputs 'cos_cache' and 'sin_cache' are expected to have the
same shape as input 'x'"), while their lowering (RotaryEmbedding expanded at opset 21)
runs. :func:`run_check` finds out by creating real sessions. Rules:

- Each model runs once in a session on ORT's CPU EP (always available) with inputs
  generated for every graph input (:func:`~onnxscript_ep_passes.ep.measure.generate_inputs`)
  at the report's dimension sizes, a dimension whose name contains ``batch`` at least 2 (a
  batch of one hides errors of batched shapes).
- When the model as given runs, nothing else is run. When it does not, each plain
  candidate opset below the model's and the chosen candidate (the model ``lower --ep``
  writes) are built on copies (the caller's model is not changed) and run the same way;
  the result lists which run and which fail, with the error's first line.
- A model whose weights exceed :data:`MAX_WEIGHT_BYTES` (2 GB) is not run (its report
  would hold a whole inference): ``skipped`` says so and ``input.ok`` is null.
- ORT's own log lines for these sessions are silenced: the report states the outcome.
- Weights in external data files are read into a copy for the session (the session is
  made from bytes, which reads no data file); the caller's model keeps its lazy tensors.
"""

from __future__ import annotations

__all__ = ["CHECK_EP", "MAX_WEIGHT_BYTES", "run_check"]

from typing import Any

import onnx_ir as ir

from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.profiles import CPU
from onnxscript_ep_passes.reports.verdict import quantity

CHECK_EP = CPU.ort_name
MAX_WEIGHT_BYTES = 2_000_000_000
_MIN_BATCH = 2


def _dims_for_check(dims: dict[str, int]) -> dict[str, int]:
    return {k: max(v, _MIN_BATCH) if "batch" in k.lower() else v for k, v in dims.items()}


def _error_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    _, found, message = text.partition("Status Message: ")
    return message if found else text


def _runs(model: ir.Model, dims: DimSizes) -> str | None:
    """None when ``model`` runs on the CPU EP, else the error's first line."""
    import onnxruntime as ort

    from onnxscript_ep_passes.ep.measure import generate_inputs

    try:
        # A session made from bytes reads no external data file: a copy holds the weights.
        in_memory = ir.external_data.load_to_model(model.clone())
        proto = ir.to_proto(in_memory)
        feeds = generate_inputs(proto, dims)
        options = ort.SessionOptions()
        options.log_severity_level = 4  # the report says what failed
        session = ort.InferenceSession(proto.SerializeToString(), options, providers=[CHECK_EP])
        session.run(None, feeds)
    except Exception as error:  # whatever ORT or the input generation refuses
        return _error_line(error)
    return None


def run_check(
    model: ir.Model, report: dict[str, Any], table: KernelTable | None = None
) -> dict[str, Any]:
    """The report's ``runs`` entry for ``model`` and its ``report`` (module docstring)."""
    from onnxscript_ep_passes.lowering.lower_opset import run_lowering
    from onnxscript_ep_passes.passes.lower_for_ep import LowerOpsetForEpPass

    dims = _dims_for_check(dict(report["objective"]["dims"]))
    result: dict[str, Any] = {"ep": CHECK_EP, "dims": dims, "skipped": None, "candidates": []}
    weights = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value)
    if weights > MAX_WEIGHT_BYTES:
        result["skipped"] = (
            f"not run: the weights are {quantity(weights, 'B')} "
            f"(over {quantity(MAX_WEIGHT_BYTES, 'B')}; --no-run skips this check)"
        )
        result["input"] = {"ok": None, "error": None}
        return result
    sizes = DimSizes(dims)
    error = _runs(model, sizes)
    result["input"] = {"ok": error is None, "error": error}
    if error is None:
        return result
    source = report["before"]["opset"]
    chosen = report["chosen"]
    opsets = sorted({c["opset"] for c in report["candidates"] if c["opset"] < source}, reverse=True)
    for opset in opsets:
        copy = model.clone()
        failed = None
        try:
            run_lowering(copy, opset)
        except Exception as lowering_error:
            failed = _error_line(lowering_error)
        failed = failed or _runs(copy, sizes)
        result["candidates"].append(
            {"opset": opset, "legalized": False, "ok": failed is None, "error": failed}
        )
    if chosen["legalized"] and table is not None:
        copy = model.clone()
        LowerOpsetForEpPass(table.ep, target_opset=chosen["opset"], table=table)(copy)
        failed = _runs(copy, sizes)
        result["candidates"].append(
            {"opset": chosen["opset"], "legalized": True, "ok": failed is None, "error": failed}
        )
    return result
