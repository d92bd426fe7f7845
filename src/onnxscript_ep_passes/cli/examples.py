"""Help of the ``onnxscript-ep-passes`` commands kept apart from their definitions in
:mod:`.cli`: the examples each command shows, and the EP objective's options (``--dims``,
``--measure``, ``--kernel-table``, ``--lowest-opset``) that ``lower --ep`` and ``report``
share, and the check of ``--lowest-opset``."""

__all__ = [
    "LOWER_EXAMPLES",
    "OPTIMIZE_EXAMPLES",
    "REPORT_EXAMPLES",
    "lowest_opset_problem",
    "objective_arguments",
]

import argparse

from onnxscript_ep_passes.cli.options import dims_value, opset_value, path_value

LOWER_EXAMPLES = """\
  # lower exactly to opset 23 (weights stay in OUT.onnx.data, next to OUT)
  onnxscript-ep-passes lower model.onnx -o model-23.onnx --target-opset 23
  # lower to the opset that puts most of the model on WebGPU (installed ORT, live table)
  onnxscript-ep-passes lower model.onnx -o model-webgpu.onnx --ep webgpu
  # for CUDA on ORT 1.24, choosing the opset only (expand no node)
  onnxscript-ep-passes lower model.onnx -o model-cuda.onnx --ep cuda --ort-version 1.24 --no-legalize"""

REPORT_EXAMPLES = """\
  # where the nodes of model.onnx land on WebGPU now and after lowering
  onnxscript-ep-passes report model.onnx --ep webgpu
  # on CUDA with ORT 1.24 (a shipped kernel table), every op listed
  onnxscript-ep-passes report model.onnx --ep cuda --ort-version 1.24 --all
  # the same as one JSON object, for scripts
  onnxscript-ep-passes report model.onnx --ep cuda --ort-version 1.24 --json"""

OPTIMIZE_EXAMPLES = """\
  # fuse into WebGPU's kernels (GroupQueryAttention, ...), lower, optimize; each fusion verified
  onnxscript-ep-passes optimize model.onnx -o model-webgpu.onnx --ep webgpu --report-json fused.json"""


def objective_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the EP objective's options to ``parser``."""
    dims_help = "sizes of symbolic dimensions (default: 'batch' 1, 'past' 128, others 128)"
    parser.add_argument("--dims", metavar="NAME=SIZE,...", type=dims_value, help=dims_help)
    measure_help = "run the best candidates in real ORT sessions on the EP; keep the fastest"
    parser.add_argument("--measure", action="store_true", help=measure_help)
    table_help = "the EP's kernels in the snapshot TSV format (an EP without a shipped table)"
    parser.add_argument("--kernel-table", metavar="FILE", type=path_value, help=table_help)
    lowest_help = (
        "weigh no opset below N (default 18): a faster search when lower opsets are not "
        "wanted (below some opset a model's ops may expand to several times its size)"
    )
    parser.add_argument("--lowest-opset", metavar="N", type=opset_value, help=lowest_help)


def lowest_opset_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with ``--lowest-opset`` (below 18, or above ``--target-opset``)."""
    if args.lowest_opset is None:
        return None
    from onnxscript_ep_passes.passes.lower_for_ep import lowest_opset_of

    try:
        lowest_opset_of(args.lowest_opset, args.target_opset)
    except ValueError as error:
        return f"--lowest-opset: {error}"
    return None
