"""Predictions on static-shape CNNs nobody here wrote, as ORT really places them on WebGPU.

Ultralytics' yolo26n (``nms=False``) and rtdetr-l, built from their YAML configs
(tests/e2e/ultralytics_models.py, random initialization), at opsets 18 and 20:

- as ultralytics exports them (TorchScript, then onnxslim: every value has its shape);
- as TorchScript exports them (``simplify=False``): no shape for any intermediate value,
  and the shape arithmetic TorchScript writes (``Shape``, ``Gather``, ``Concat``,
  ``ConstantOfShape``, ``Range``) left in the graph, which ORT folds once its own shape
  inference makes the shapes static (:mod:`onnxscript_ep_passes.ep.placement.load_shapes`);

and a plain torchvision-free CNN exported by torch's TorchScript exporter
(``dynamo=False``, ``do_constant_folding=False``: no shape for any intermediate value;
the ``view``'s shape is ``Unsqueeze``/``Concat`` of constants, which ORT folds). Each as
exported and as ``LowerOpsetForEpPass("webgpu")`` lowers it, at ORT's default level
(:func:`~tests.e2e.helpers.run_on_webgpu`) and at ``ORT_ENABLE_BASIC``:

1. the predicted Memcpy nodes equal ORT's, in number and direction;
2. the nodes predicted on CPU are ORT's, op type by op type;
3. at ``ORT_ENABLE_BASIC``, the nodes predicted removed before placing are missing from
   ORT's placement record, by name, and the only others missing are those of the level-1
   fusions the prediction does not model (:data:`UNMODELLED`: BatchNormalization fused into
   its Conv, MatMul+Add made a Gemm, Transposes pushed and cancelled, 6 Reshapes and
   1 Unsqueeze on rtdetr-l).
"""

from __future__ import annotations

import collections
import functools
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from onnxscript_ep_passes.ep import KernelTable, measure_placement, predict_placement
from onnxscript_ep_passes.passes import LowerOpsetForEpPass
from tests.e2e.helpers import run_on_webgpu
from tests.e2e.prediction_checks import assert_removed_as_ort, assert_same_memcpy
from tests.e2e.ultralytics_models import MODELS, cached_ultralytics_models, find_ultralytics
from tests.fusion import WEBGPU_EXPORT_MARKS

pytestmark = [
    *WEBGPU_EXPORT_MARKS,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

OPSETS = (18, 20)
EXPORTERS = ("ultralytics", "torchscript")
CASES = [
    pytest.param(model, exporter, opset, id=f"{model}-{exporter}-{opset}")
    for model in (*MODELS, "plain_cnn")
    for exporter in (EXPORTERS if model != "plain_cnn" else ("torchscript",))
    for opset in OPSETS
]
BASIC = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
#: what ORT's level-1 fusions the prediction does not model remove from these CNNs (they
#: keep the data on the device it is on: Conv+BatchNormalization, MatMul+Add into Gemm
#: and its Reshapes, the transpose optimizer's pushes)
UNMODELLED = frozenset({"BatchNormalization", "MatMul", "Add", "Reshape", "Transpose", "Unsqueeze"})


def _plain_cnn(opset: int) -> onnx.ModelProto:
    """A small CNN (Conv, BatchNorm, pooling, nearest upsampling, a skip Concat, a
    ``view`` flatten, Linear), exported by torch's TorchScript exporter without its own
    constant folding, so the graph keeps what it traced (the ``view``'s
    ``Unsqueeze``/``Concat`` of constants, BatchNormalization) for ORT to fold."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class PlainCnn(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            self.down = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
            self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
            self.head = nn.Conv2d(16, 16, 1)
            self.fc = nn.Linear(16 * 4 * 4, 10)

        def forward(self, x: Any) -> Any:
            skip = self.stem(x)
            y = torch.cat([self.up(self.down(skip)), skip], dim=1)
            y = nn.functional.adaptive_avg_pool2d(self.head(y), 4)
            return self.fc(y.view(y.size(0), -1))

    torch.manual_seed(0)
    model = PlainCnn().eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics
        model.stem[1].running_mean.uniform_(-0.5, 0.5)
        model.stem[1].running_var.uniform_(0.5, 1.5)
    import io

    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(
            model,
            (torch.randn(1, 3, 32, 32),),
            buffer,
            opset_version=opset,
            dynamo=False,
            input_names=["x"],
            output_names=["y"],
            do_constant_folding=False,  # torch's own folding would fold it all
        )
    return onnx.load_from_string(buffer.getvalue())


def _export(model: str, exporter: str, opset: int) -> onnx.ModelProto:
    if model == "plain_cnn":
        return _plain_cnn(opset)
    target, reason = find_ultralytics()
    if target is None:
        pytest.skip(reason)
    exports = cached_ultralytics_models(target, MODELS, OPSETS, simplify=exporter != "torchscript")
    return onnx.load(str(exports[model, opset].path))


@functools.cache
def _models(model: str, exporter: str, opset: int, table: KernelTable) -> dict[str, bytes]:
    """The export as it came and as lowered for WebGPU (serialized: each test parses its
    own copy)."""
    proto = _export(model, exporter, opset)
    lowered = ir.from_proto(proto)
    LowerOpsetForEpPass("webgpu", table=table)(lowered)
    return {
        "original": proto.SerializeToString(),
        "lowered": ir.to_proto(lowered).SerializeToString(),
    }


def _parse(data: bytes) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    return proto


def _feeds(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for value in proto.graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


@pytest.mark.parametrize("level", ["default", "basic"])
@pytest.mark.parametrize("variant", ["original", "lowered"])
@pytest.mark.parametrize(("model", "exporter", "opset"), CASES)
def test_predicted_placement_equals_orts(
    model: str, exporter: str, opset: int, variant: str, level: str, webgpu_table: KernelTable
) -> None:
    proto = _parse(_models(model, exporter, opset, webgpu_table)[variant])
    if level == "default":  # a session as a user makes it, written apart from the package
        pred = predict_placement(proto, webgpu_table)
        run = run_on_webgpu(proto, _feeds(proto))
        memcpy, cpu = (run.memcpy_from_host, run.memcpy_to_host), run.cpu_summary()
    else:
        pred = predict_placement(proto, webgpu_table, optimization_level=BASIC)
        measured = measure_placement(proto, "webgpu", graph_optimization_level=BASIC)
        memcpy = (measured.memcpy_from_host, measured.memcpy_to_host)
        cpu = dict(collections.Counter(n.op_type for n in measured.cpu_nodes))
    assert_same_memcpy(pred, *memcpy)
    assert collections.Counter(n.op_type for n in pred.cpu_nodes) == collections.Counter(cpu)
    if level == "basic":
        assert_removed_as_ort(proto, webgpu_table, pred, BASIC, exact=True, unmodelled=UNMODELLED)


def test_torchscript_exports_need_orts_inference(webgpu_table: KernelTable) -> None:
    """The premise of the TorchScript cases: rtdetr-l's export spells no intermediate
    shape, and the Shape nodes ORT folds are folded only because the prediction infers
    shapes as ORT does at load (a Shape of a value the model gives no shape)."""
    proto = _parse(_models("rtdetr-l", "torchscript", 20, webgpu_table)["original"])
    assert not proto.graph.value_info
    pred = predict_placement(proto, webgpu_table, optimization_level=BASIC)
    typed = {v.name for v in (*proto.graph.input, *proto.graph.output)}
    folded = [
        r
        for r in pred.removed
        if r.rule == "shape_folding" and r.node is not None and r.node.inputs[0] is not None
    ]
    untyped = [r for r in folded if r.node is not None and r.node.inputs[0].name not in typed]
    assert len(untyped) >= 50, pred.removed_by_rule()
    assert not [n for n in pred.cpu_nodes if n.op_type == "Shape"]
