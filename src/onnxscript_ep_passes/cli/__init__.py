"""The command line: ``onnxscript-ep-passes lower|report|optimize`` (or ``python -m
onnxscript_ep_passes``); :func:`main` is its entry point.

- :mod:`~onnxscript_ep_passes.cli.program` -- the program: subcommands, exit codes, errors.
- :mod:`~onnxscript_ep_passes.cli.lower` and :mod:`~onnxscript_ep_passes.cli.optimize` -- the
  subcommands' work.
- :mod:`~onnxscript_ep_passes.cli.options`, :mod:`~onnxscript_ep_passes.cli.files` and
  :mod:`~onnxscript_ep_passes.cli.examples` -- option values, the files besides the model,
  and the help's examples.
"""

from onnxscript_ep_passes.cli.program import main

__all__ = ["main"]
