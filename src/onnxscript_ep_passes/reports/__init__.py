"""Reports: what a model looks like on an EP before and after the lowering, for people and
programs.

- :mod:`~onnxscript_ep_passes.reports.report` -- :func:`placement_report`, the JSON report
  (schemas ``report.schema.json`` and ``optimize_report.schema.json`` ship beside it).
- :mod:`~onnxscript_ep_passes.reports.text` -- the same report as text.
- :mod:`~onnxscript_ep_passes.reports.verdict` -- one-line verdicts in words.
- :mod:`~onnxscript_ep_passes.reports.run_check` -- does the model really run, and which
  candidate repairs it.
"""

__all__: list[str] = []
