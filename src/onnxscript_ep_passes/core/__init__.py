"""The package's shared core: small helpers every layer uses, importing nothing above them.

- :mod:`~onnxscript_ep_passes.core.onnx_utils` -- ONNX spelling shared by graph rewriting
  (``lowering``) and EP knowledge (``ep``): opset imports, attributes, dtypes.
- :mod:`~onnxscript_ep_passes.core.checkpoint` -- edit an IR model in place, then put it back.
- :mod:`~onnxscript_ep_passes.core.copies` -- copies of an IR model and their node maps.
- :mod:`~onnxscript_ep_passes.core.collector` -- the garbage collector during long rewrites.
- :mod:`~onnxscript_ep_passes.core.display` -- text from a model shown to people, escaped.
- :mod:`~onnxscript_ep_passes.core.console` -- where log records and native messages go.
- :mod:`~onnxscript_ep_passes.core.progress` -- progress bars, drawn only on a terminal.
- :mod:`~onnxscript_ep_passes.core.signals` -- interrupts (Ctrl-C, ``kill``) as one exception.
"""

__all__: list[str] = []
