"""Sizes of symbolic dimensions: user bindings, name defaults, expressions, unknowns."""

from __future__ import annotations

import onnx_ir as ir
import pytest

from onnxscript_ep_passes.ep.dims import (
    DEFAULT_BATCH,
    DEFAULT_PAST,
    DEFAULT_SEQUENCE,
    DimSizes,
    parse_dims,
)


def test_parse_dims() -> None:
    assert parse_dims("batch=4, sequence_length=512") == {"batch": 4, "sequence_length": 512}
    assert parse_dims("") == {} and parse_dims(None) == {}


@pytest.mark.parametrize("bad", ["batch", "batch=", "batch=0", "batch=-1", "=3", "batch=x"])
def test_parse_dims_rejects_with_the_entry_named(bad: str) -> None:
    with pytest.raises(ValueError, match="--dims entry") as info:
        parse_dims(f"sequence_length=2,{bad}")
    assert repr(bad.strip()) in str(info.value)


def test_defaults_by_name() -> None:
    sizes = DimSizes()
    assert sizes.named("batch") == sizes.named("batch_size") == DEFAULT_BATCH
    assert sizes.named("sequence_length") == sizes.named("s0") == DEFAULT_SEQUENCE
    assert sizes.named("past_sequence_length") == DEFAULT_PAST
    assert sizes.named("total_sequence_length") == DEFAULT_PAST + DEFAULT_SEQUENCE


def test_bindings_and_expressions() -> None:
    sizes = DimSizes.of("batch=3,sequence_length=7,past_sequence_length=5")
    assert sizes.named("batch") == 3
    assert sizes.named("past_sequence_length + sequence_length") == 12
    assert sizes.named("2*sequence_length - 1") == 13
    assert sizes.named("max(sequence_length, past_sequence_length)") == 7
    assert sizes.named("total_sequence_length") == 12  # past + sequence
    assert sizes.named("((unparsable") == DEFAULT_SEQUENCE
    assert DimSizes.of({"weird name + 1": 9}).named("weird name + 1") == 9


def test_shape_elements_count_one_unknown_dimension_only() -> None:
    sizes = DimSizes.of({"batch": 2})
    shape = ir.Shape(["batch", 4, None, None])
    assert sizes.elements(shape) == 2 * 4 * DEFAULT_SEQUENCE
    assert sizes.elements([3, 5]) == 15


def test_names_shape_inference_made_up_are_unknown() -> None:
    sizes = DimSizes()
    shape = ir.Shape(["unk__61", "unk__62", "unk__63", "unk__64"])
    assert sizes.elements(shape) == DEFAULT_SEQUENCE
    assert sizes.size("unk__7") == DEFAULT_SEQUENCE
    assert DimSizes.of({"unk__7": 3}).named("unk__7") == 3  # a user's binding still counts
