"""The EP search's answer: one map of candidates, and the views and lookups read from it."""

from __future__ import annotations

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.passes import CandidateEntry, choose_target_opset
from tests.passes import gelu_neg_model, no_gelu_table

FLOAT = onnx.TensorProto.FLOAT


def test_lookups_and_views_read_the_one_map() -> None:
    original, table = gelu_neg_model(), no_gelu_table()
    choice = choose_target_opset(
        ir.from_proto(original), table, lowest_opset=22, ort_version_requested="0.0"
    )
    assert choice.ort_version_requested == "0.0" and not choice.ort_version_assumed
    assert all(isinstance(c, CandidateEntry) for c in choice.candidates.values())
    assert all(key == c.key for key, c in choice.candidates.items())
    assert choice.before is choice.candidates[(24, False)].prediction
    chosen = choice.candidates[(choice.chosen_opset, choice.legalized)]
    assert choice.after is chosen.prediction and choice.after_cost is chosen.cost
    assert choice.expanded == chosen.expanded
    plain = {o for o, legalized in choice.candidates if not legalized}
    legalized = {o for o, lg in choice.candidates if lg}
    assert set(choice.predictions) == set(choice.costs) == plain
    assert legalized and set(choice.legalized_predictions) == set(choice.plan) == legalized
    assert choice.replaced == {k: c.replaced for k, c in choice.candidates.items()}
    assert not choice.measured
    assert all(not c.expanded for (_, lg), c in choice.candidates.items() if not lg)
