"""A refusal names the model's own node, and what its lowering built that could not go lower."""

from __future__ import annotations

import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

from onnxscript_ep_passes import DowngradeError
from onnxscript_ep_passes.lowering.lower_opset import run_lowering
from tests.harness import make_model, registry_expanding_celu_28_in_its_type


def test_refusal_of_a_built_node_names_the_users_node() -> None:
    bf16 = [oh.make_tensor_value_info(n, TensorProto.BFLOAT16, [2]) for n in ("x", "y")]
    model = make_model([oh.make_node("Celu", ["x"], ["y"], name="celu")], [bf16[0]], [bf16[1]], 28)
    registry = registry_expanding_celu_28_in_its_type()
    with pytest.raises(DowngradeError) as caught:
        # Celu-28 expands into Elu-22, which has no bfloat16 below 22
        run_lowering(ir.from_proto(model), 21, registry=registry)
    (refusal,) = caught.value.refusals
    assert (refusal.node_name, refusal.op_type, refusal.since_version) == ("celu", "Celu", 28)
    assert refusal.reason.startswith("its lowering built Elu-22 'celu/lowered_Elu_1'")
    assert "BFLOAT16, which Elu-6 does not allow" in refusal.reason
    assert "node 'celu' (Celu-28" in str(caught.value)
