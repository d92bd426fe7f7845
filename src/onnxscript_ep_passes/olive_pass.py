"""An Olive pass (olive-ai 0.13): lower the model's ai.onnx opset for the workflow's EP.

Install with ``pip install onnxscript-ep-passes[olive]``; docs/olive.md has a complete
workflow config.

Rules:

- The EP is the ``execution_provider`` of the workflow's accelerator spec (Olive runs the
  pass once per spec; the pass is not accelerator-agnostic). A spec without one means the
  CPU EP, for which nothing is lowered.
- The pass is :class:`~onnxscript_ep_passes.passes.LowerOpsetForEpPass`: it picks the opset
  (and, unless ``legalize`` is false, the expansions) that put most of the model on that
  EP, as predicted from the EP's kernel table for ``ort_version``; ``target_opset`` forces
  an opset instead.
- A model that cannot be lowered exactly fails the workflow with
  :class:`~onnxscript_ep_passes.DowngradeError` naming every offending node. It is never
  passed on at its old opset (as Olive's own ``OnnxOpVersionConversion`` does when
  onnxscript's converter gives up).
- The output model's weights are written beside it: a model read with external data is
  saved with external data (one data file in the output model's folder, named by
  Olive's ``external_data_name`` or ``<model>.data``), whatever
  ``save_as_external_data`` says, so the output never points at the input's data file
  (which Olive does not copy to the output folder); inline weights follow Olive's
  options.
- The output model's ``model_attributes["ep_lowering"]`` holds the verdict line
  (:meth:`~onnxscript_ep_passes.passes.EpLoweringChoice.summary`).
- Olive finds passes through its package config, which lists only its own. A workflow
  that uses this pass runs with :func:`package_config` (Olive's own config plus this
  pass): :func:`run_workflow` does that, and ``python -m
  onnxscript_ep_passes.olive_pass > olive-package.json`` writes it for ``olive run
  --config WORKFLOW --package-config olive-package.json``.
"""

from __future__ import annotations

__all__ = ["PASS_NAME", "LowerOpsetForEp", "main", "package_config", "run_workflow"]

import json
import logging
import sys
from pathlib import Path
from typing import Any

from olive.hardware import AcceleratorSpec
from olive.model import ONNXModelHandler
from olive.model.utils.onnx_utils import resolve_onnx_path
from olive.package_config import OlivePackageConfig
from olive.passes import Pass
from olive.passes.onnx.common import get_external_data_config, ir_model_to_olive_model
from olive.passes.pass_config import BasePassConfig, PassConfigParam

from onnxscript_ep_passes.ep.profiles import CPU
from onnxscript_ep_passes.model_files.io import has_external_data
from onnxscript_ep_passes.passes.lower_for_ep import EpLoweringResult, LowerOpsetForEpPass
from onnxscript_ep_passes.passes.options import SearchOptions

logger = logging.getLogger(__name__)

PASS_NAME = "LowerOpsetForEp"
"""The pass's ``type`` in a workflow config."""

_MODULE = "onnxscript_ep_passes.olive_pass"  # not __name__: "__main__" under ``python -m``


class LowerOpsetForEp(Pass):
    """Lower the ai.onnx opset for the accelerator spec's EP (see the module docstring)."""

    @classmethod
    def _default_config(cls, accelerator_spec: AcceleratorSpec) -> dict[str, PassConfigParam]:
        config = {
            "ort_version": PassConfigParam(
                type_=str,
                default_value=None,
                description="The ORT release the model will run on (e.g. '1.24'). Default: the "
                "installed one, whose kernels are listed live when it can load the EP, else "
                "the nearest shipped kernel-table snapshot.",
            ),
            "target_opset": PassConfigParam(
                type_=int,
                default_value=None,
                description="Lower to this opset instead of the one best for the EP.",
            ),
            "legalize": PassConfigParam(
                type_=bool,
                default_value=True,
                description="Also expand nodes the EP cannot run at any opset (through their "
                "ONNX function bodies) when that improves the predicted placement.",
            ),
            "lowest_opset": PassConfigParam(
                type_=int,
                default_value=None,
                description="Weigh no opset below this one (default 18): a faster search "
                "when lower opsets are not wanted.",
            ),
        }
        config.update(get_external_data_config())
        return config

    @staticmethod
    def is_accelerator_agnostic(accelerator_spec: AcceleratorSpec) -> bool:
        return False

    def _run_for_config(
        self,
        model: ONNXModelHandler,
        config: type[BasePassConfig],
        output_model_path: str,
    ) -> ONNXModelHandler:
        ep = str(self.accelerator_spec.execution_provider or CPU.ort_name)
        ir_model = model.load_ir_model()
        options = SearchOptions.of(
            target_opset=config.target_opset,
            lowest_opset=config.lowest_opset,
            legalize=config.legalize,
        )
        lowering = LowerOpsetForEpPass(ep, config.ort_version, options=options)
        result = lowering(ir_model)
        assert isinstance(result, EpLoweringResult)
        choice = result.choice
        summary = choice.summary() if choice is not None else f"{ep} runs every opset"
        logger.info("%s: %s", PASS_NAME, summary)
        external = config.model_dump()
        if has_external_data(ir_model):
            external["save_as_external_data"] = True  # the weights go beside the output
        output_path = resolve_onnx_path(output_model_path)
        output = ir_model_to_olive_model(ir_model, output_path, external)
        output.model_attributes = {**(model.model_attributes or {}), "ep_lowering": summary}
        return output


def package_config() -> dict[str, Any]:
    """Olive's default package config with this pass added (a JSON-able dict)."""
    with open(OlivePackageConfig.get_default_config_path()) as f:
        config: dict[str, Any] = json.load(f)
    config.setdefault("passes", {})[PASS_NAME] = {
        "module_path": f"{_MODULE}.{LowerOpsetForEp.__name__}",
        "supported_providers": ["*"],
        "supported_accelerators": ["*"],
        "supported_precisions": ["*"],
        "supported_algorithms": [],
        "supported_quantization_encodings": [],
    }
    return config


def run_workflow(workflow: str | Path | dict[str, Any], **kwargs: Any) -> Any:
    """``olive.workflows.run`` with :func:`package_config`; returns what it returns."""
    from olive.workflows import run

    return run(workflow, package_config=package_config(), **kwargs)


def main() -> int:
    """Write :func:`package_config` as JSON to stdout."""
    sys.stdout.write(json.dumps(package_config(), indent=2) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
