"""Help of the ``onnxscript-ep-passes`` commands kept apart from their definitions in
:mod:`.cli`: the examples each command shows (the options the EP commands share are
:func:`~onnxscript_ep_passes.cli.options.search_arguments`)."""

__all__ = ["LOWER_EXAMPLES", "OPTIMIZE_EXAMPLES", "REPORT_EXAMPLES"]

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
