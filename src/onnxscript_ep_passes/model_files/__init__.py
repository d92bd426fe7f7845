"""Model files: loading untrusted files, saving atomically, and the checks on both sides.

- :mod:`~onnxscript_ep_passes.model_files.io` -- load a model from a file nobody vetted, save
  one atomically with its weights held once.
- :mod:`~onnxscript_ep_passes.model_files.model_checks` and
  :mod:`~onnxscript_ep_passes.model_files.external_data_checks` -- what a parsed proto must
  be before anything else reads it.
- :mod:`~onnxscript_ep_passes.model_files.paths` -- no output may destroy an input or another
  output.
- :mod:`~onnxscript_ep_passes.model_files.atomic` -- a private staging folder moved into place.
- :mod:`~onnxscript_ep_passes.model_files.proto_save` -- saving while the weights are copied.
- :mod:`~onnxscript_ep_passes.model_files.output_check` -- onnx's checker before the rename.
"""

__all__: list[str] = []
