"""Realistic one-op models for proving the derived type rules.

Where they come from:

* ONNX's own node test cases (``onnx.backend.test.case.node.collect_testcases()``): for
  op X, the cases whose main graph holds only X nodes, relabelled to opset ``v`` (with the
  newest IR version ``v`` allows) and kept only when ``onnx.checker`` (full_check) accepts
  them at ``v`` *and* at the opset they are lowered to (a case exercising a type the older
  schema lacks is not benign), and when their recorded inputs can be fed to ORT.
* Hand-built one-op models for the ops ONNX ships no node test for (GlobalLpPool,
  MaxRoiPool, Optional and the random generators).
* For the new-feature variant: the same kind of model with the values bound to a widened
  type parameter retyped to one of the added types (:func:`new_type_model`).
"""

from __future__ import annotations

__all__ = [
    "RANDOM_OPS",
    "OneOpModel",
    "all_testcases",
    "benign_models",
    "missing_steps",
    "new_type_model",
    "relabel",
]

import dataclasses
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
from onnx import TensorProto
from onnx.backend.test.case.test_case import TestCase

from onnxscript_ep_passes import DEFAULT_REGISTRY
from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.lower_opset import max_ir_version_for_opset
from tests.harness import Feeds, make_model, run_model

# Ops whose outputs are random: compared by shape/dtype (and exactly only when both
# models run through the same seeded evaluator), never value by value across runtimes.
RANDOM_OPS = frozenset(
    {
        "Bernoulli",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)

# When a step adds several element types, the one its new-feature variant uses: the
# type the opset is known for first, then any other in alphabetical order.
_PREFERRED_NEW_TYPES = (
    "float8e8m0",
    "int2",
    "float4e2m1",
    "float6e2m3",
    "int4",
    "float8e4m3fn",
    "bfloat16",
    "string",
    "bool",
)

_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


@dataclasses.dataclass(frozen=True)
class OneOpModel:
    """A model whose main graph holds only nodes of one op, with inputs to run it on."""

    name: str
    model: onnx.ModelProto
    feeds: Feeds
    # The outputs, computed independently, for a model that neither ORT nor onnx.reference
    # can run at its opset (GlobalLpPool, MaxRoiPool).
    expected: tuple[np.ndarray, ...] | None = None


# -- ONNX's node test cases ----------------------------------------------------------------


@functools.cache
def all_testcases() -> tuple[TestCase, ...]:
    """ONNX's node test cases (collected once per test session)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow on purpose
        from onnx.backend.test.case.node import collect_testcases

        return tuple(collect_testcases())


@functools.cache
def _testcases_by_op() -> dict[str, tuple[TestCase, ...]]:
    grouped: dict[str, list[TestCase]] = {}
    for case in all_testcases():
        if case.model is None:
            continue
        ops = {node.op_type for node in case.model.graph.node}
        domains = {node.domain for node in case.model.graph.node}
        if len(ops) == 1 and domains <= schemas.DEFAULT_DOMAINS:
            grouped.setdefault(ops.pop(), []).append(case)
    # The op's own tests (test_identity...) before those that merely use it.
    return {
        op: tuple(sorted(found, key=lambda c: not c.name.startswith(f"test_{op.lower()}")))
        for op, found in grouped.items()
    }


def relabel(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """A copy of ``model`` declaring ai.onnx ``opset`` and the newest IR version it allows."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for entry in copy.opset_import:
        if entry.domain in schemas.DEFAULT_DOMAINS:
            entry.version = opset
    copy.ir_version = max_ir_version_for_opset(opset)
    return copy


def is_valid(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return False
    return True


def _as_feed(value: object) -> object:
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_as_feed(item) for item in value]
    return value


def _feedable(value: object) -> bool:
    if isinstance(value, np.ndarray):
        # ORT's python API takes only numpy's own dtypes, not ml_dtypes' (bfloat16, float8,
        # int4, ...: dtype.isbuiltin == 2).
        return value.dtype.isbuiltin == 1 and value.dtype.kind in "biufcUSO"
    if isinstance(value, list):
        return all(_feedable(item) for item in value)
    return False


def _feeds(case: TestCase, model: onnx.ModelProto) -> Feeds | None:
    data_sets = case.data_sets
    if not data_sets:
        return None
    inputs = [_as_feed(value) for value in data_sets[0][0]]
    initializers = {init.name for init in model.graph.initializer}
    names = [value.name for value in model.graph.input if value.name not in initializers]
    if len(names) != len(inputs) or not all(_feedable(value) for value in inputs):
        return None
    return dict(zip(names, inputs))


def _has_seed(model: onnx.ModelProto) -> bool:
    return all(any(attr.name == "seed" for attr in node.attribute) for node in model.graph.node)


def _runs(model: onnx.ModelProto, feeds: Feeds) -> bool:
    try:
        run_model(model, feeds)
    except Exception:
        return False
    return True


def _backend_models(op: str, opset: int, allowed_at: int) -> Iterator[OneOpModel]:
    for case in _testcases_by_op().get(op, ()):
        assert case.model is not None
        model = relabel(case.model, opset)
        if op in RANDOM_OPS and not _has_seed(model):
            continue  # unseeded random outputs cannot be compared
        if not is_valid(model) or not is_valid(relabel(model, allowed_at)):
            continue
        feeds = _feeds(case, model)
        if feeds is None or not _runs(model, feeds):
            continue
        yield OneOpModel(case.name, model, feeds)


# -- hand-built one-op models --------------------------------------------------------------


def _info(name: str, elem: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def _global_lp_pool(opset: int) -> OneOpModel:
    node = oh.make_node("GlobalLpPool", ["x"], ["y"], name="pool", p=2)
    model = make_model(
        [node],
        [_info("x", TensorProto.FLOAT, [1, 3, 4, 5])],
        [_info("y", TensorProto.FLOAT, [1, 3, 1, 1])],
        opset,
    )
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype(np.float32)
    y = np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=(2, 3), keepdims=True))
    return OneOpModel("hand_global_lp_pool", model, {"x": x}, (y.astype(np.float32),))


def _max_roi_pool(opset: int) -> OneOpModel:
    node = oh.make_node(
        "MaxRoiPool", ["x", "rois"], ["y"], name="roi", pooled_shape=[2, 2], spatial_scale=1.0
    )
    model = make_model(
        [node],
        [_info("x", TensorProto.FLOAT, [1, 2, 6, 6]), _info("rois", TensorProto.FLOAT, [2, 5])],
        [_info("y", TensorProto.FLOAT, [2, 2, 2, 2])],
        opset,
    )
    x = np.random.default_rng(1).standard_normal((1, 2, 6, 6)).astype(np.float32)
    rois = np.array([[0, 0, 0, 3, 3], [0, 1, 2, 5, 5]], dtype=np.float32)
    return OneOpModel(
        "hand_max_roi_pool", model, {"x": x, "rois": rois}, (_max_roi_pool_numpy(x, rois, 2, 2),)
    )


def _max_roi_pool_numpy(x: np.ndarray, rois: np.ndarray, ph: int, pw: int) -> np.ndarray:
    """MaxRoiPool with spatial_scale 1, as ONNX's spec (Caffe's RoI pooling) defines it."""
    out = np.zeros((len(rois), x.shape[1], ph, pw), dtype=x.dtype)
    height, width = x.shape[2:]
    for r, (batch, x1, y1, x2, y2) in enumerate(np.round(rois).astype(int)):
        roi_h, roi_w = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for i in range(ph):
            for j in range(pw):
                h0 = min(max(int(np.floor(i * roi_h / ph)) + y1, 0), height)
                h1 = min(max(int(np.ceil((i + 1) * roi_h / ph)) + y1, 0), height)
                w0 = min(max(int(np.floor(j * roi_w / pw)) + x1, 0), width)
                w1 = min(max(int(np.ceil((j + 1) * roi_w / pw)) + x1, 0), width)
                if h1 > h0 and w1 > w0:
                    out[r, :, i, j] = x[batch, :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


def _optional(opset: int) -> OneOpModel:
    # Wrap a tensor in an optional and unwrap it again. ORT 1.32 has no Optional-28 kernel
    # and onnx.reference (1.23) wraps an optional tensor in a list, which its
    # OptionalGetElement passes on: the expected outputs are given here instead.
    nodes = [
        oh.make_node("Optional", ["x"], ["opt"], name="opt"),
        oh.make_node("OptionalHasElement", ["opt"], ["has"], name="has"),
        oh.make_node("OptionalGetElement", ["opt"], ["y"], name="get"),
    ]
    model = make_model(
        nodes,
        [_info("x", TensorProto.FLOAT, [2, 3])],
        [_info("y", TensorProto.FLOAT, [2, 3]), _info("has", TensorProto.BOOL, [])],
        opset,
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    return OneOpModel("hand_optional", model, {"x": x}, (x, np.array(True)))


def _optional_alone(opset: int) -> onnx.ModelProto:
    """One Optional node whose output (an optional) is the graph output: retyped by the
    new-feature variant, never run."""
    node = oh.make_node("Optional", ["x"], ["y"], name="opt")
    out = oh.make_value_info(
        "y", oh.make_optional_type_proto(oh.make_tensor_type_proto(TensorProto.FLOAT, [2, 3]))
    )
    return make_model([node], [_info("x", TensorProto.FLOAT, [2, 3])], [out], opset)


def _random(op: str) -> Callable[[int], OneOpModel]:
    def build(opset: int) -> OneOpModel:
        attrs: dict[str, Any] = {"seed": 7.0}
        inputs: list[onnx.ValueInfoProto] = []
        feeds: Feeds = {}
        out_elem = TensorProto.FLOAT
        out_shape = [3, 4]
        if op in ("RandomNormal", "RandomUniform"):
            attrs["shape"] = out_shape
        else:
            inputs = [_info("x", TensorProto.FLOAT, [3, 4])]
            feeds = {"x": np.random.default_rng(2).random((3, 4)).astype(np.float32)}
        if op == "Multinomial":
            attrs["sample_size"] = 5
            out_elem = TensorProto.INT32
            out_shape = [3, 5]
        node = oh.make_node(op, [i.name for i in inputs], ["y"], name="rand", **attrs)
        model = make_model([node], inputs, [_info("y", out_elem, out_shape)], opset)
        return OneOpModel(f"hand_{op.lower()}_seeded", model, feeds)

    return build


HAND_BUILT: dict[str, Callable[[int], OneOpModel]] = {
    "GlobalLpPool": _global_lp_pool,
    "MaxRoiPool": _max_roi_pool,
    "Optional": _optional,
    **{op: _random(op) for op in sorted(RANDOM_OPS)},
}


@functools.cache
def benign_models(op: str, opset: int, allowed_at: int, limit: int) -> tuple[OneOpModel, ...]:
    """Up to ``limit`` valid one-op models of ``op`` at ``opset`` whose types ``allowed_at``
    also allows, each with inputs it runs on (in ORT or, failing that, onnx.reference).

    Backend cases come first; the hand-built model of the op is used when ONNX has none.
    """
    found: list[OneOpModel] = []
    for candidate in _backend_models(op, opset, allowed_at):
        found.append(candidate)
        if len(found) >= limit:
            break
    if not found and op in HAND_BUILT:
        built = HAND_BUILT[op](opset)
        assert is_valid(built.model), f"hand-built {op} model is invalid at opset {opset}"
        found.append(built)
    return tuple(found)


def missing_steps(model: onnx.ModelProto, opset: int, target: int) -> list[str]:
    """The ``op-version`` steps, for every ai.onnx node of ``model`` (at any depth) read at
    ``opset``, that the registry has no rule for on the way down to ``target``."""
    missing: list[str] = []

    def visit(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    visit(attr.g)
                for sub in attr.graphs:
                    visit(sub)
            if node.domain not in schemas.DEFAULT_DOMAINS:
                continue
            version = schemas.since_version(node.op_type, opset)
            while version is not None and version > target:
                if DEFAULT_REGISTRY.lookup("", node.op_type, version) is None:
                    step = f"{node.op_type}-{version}"
                    if step not in missing:
                        missing.append(step)
                version = schemas.since_version(node.op_type, version - 1)

    visit(model.graph)
    return missing


# -- new-feature variants: retype the values bound to a widened type parameter -----------------


def _innermost(type_proto: onnx.TypeProto) -> onnx.TypeProto.Tensor | None:
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return type_proto.tensor_type
    if kind == "sequence_type":
        return _innermost(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return _innermost(type_proto.optional_type.elem_type)
    return None


def _type_str(type_proto: onnx.TypeProto) -> str:
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        name = TensorProto.DataType.Name(type_proto.tensor_type.elem_type).lower()
        return f"tensor({name})"
    if kind == "sequence_type":
        return f"seq({_type_str(type_proto.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({_type_str(type_proto.optional_type.elem_type)})"
    return "?"


def _elem_of(type_str: str) -> str:
    while "(" in type_str:
        type_str = type_str[type_str.index("(") + 1 : -1]
    return type_str


def pretty_type(type_str: str) -> str:
    """How a refusal message spells a type: 'FLOAT8E8M0' for a tensor, else as in onnx.defs."""
    if type_str.startswith("tensor("):
        return type_str[len("tensor(") : -1].upper()
    return type_str


def new_elem_type(op: str, version: int) -> str:
    """The added element type the new-feature variant of step ``op``-``version`` uses."""
    diff = schemas.step_diff(op, version)
    elems = {_elem_of(t) for types in diff.added_types.values() for t in types}
    for elem in _PREFERRED_NEW_TYPES:
        if elem in elems:
            return elem
    return sorted(elems)[0]


def _formal_index(formals: list[onnx.defs.OpSchema.FormalParameter], index: int) -> int | None:
    if index < len(formals):
        return index
    last = formals[-1] if formals else None
    if last is not None and last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return len(formals) - 1
    return None


def _zero_tensor(name: str, elem: int, dims: list[int]) -> onnx.TensorProto:
    count = int(np.prod(dims)) if dims else 1
    if elem == TensorProto.STRING:
        return oh.make_tensor(name, elem, dims, [b"a"] * count)  # type: ignore[list-item]
    return oh.make_tensor(name, elem, dims, [0] * count)


def _retype(model: onnx.ModelProto, op: str, version: int, elem_name: str) -> list[str]:
    """Retype, in place, every value of the first ``op`` node bound to a type parameter
    that step ``op``-``version`` widened with ``elem_name``; return the new type strings
    in the order the node's inputs then outputs list them."""
    elem = getattr(TensorProto, elem_name.upper())
    diff = schemas.step_diff(op, version)
    params = {p for p, types in diff.added_types.items() if elem_name in map(_elem_of, types)}
    schema = schemas.get_schema(op, version)
    assert schema is not None
    node = next(n for n in model.graph.node if n.op_type == op)
    infos_by_name: dict[str, list[onnx.ValueInfoProto]] = {}
    for info in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        infos_by_name.setdefault(info.name, []).append(info)
    retyped: list[str] = []
    retyped_outputs = False
    for names, formals, is_output in (
        (node.input, list(schema.inputs), False),
        (node.output, list(schema.outputs), True),
    ):
        for index, name in enumerate(names):
            position = _formal_index(formals, index)
            if not name or position is None or formals[position].type_str not in params:
                continue
            for info in infos_by_name.get(name, []):
                tensor = _innermost(info.type)
                if tensor is not None:
                    tensor.elem_type = elem
            for i, init in enumerate(model.graph.initializer):
                if init.name == name:
                    model.graph.initializer[i].CopyFrom(_zero_tensor(name, elem, list(init.dims)))
            if infos_by_name.get(name):
                retyped.append(_type_str(infos_by_name[name][0].type))
            else:
                retyped.append(f"tensor({elem_name})")
            retyped_outputs = retyped_outputs or is_output
    _fix_type_attributes(model, node, schema, elem, retyped_outputs)
    return retyped


def _fix_type_attributes(
    model: onnx.ModelProto,
    node: onnx.NodeProto,
    schema: onnx.defs.OpSchema,
    elem: int,
    retyped_outputs: bool,
) -> None:
    """Make the attributes that decide the output type agree with the retyped values."""
    present = {attr.name: attr for attr in node.attribute}
    outputs = {info.name: info for info in model.graph.output}
    if retyped_outputs:
        for attr in node.attribute:
            if attr.name in ("to", "dtype", "output_dtype") and attr.type == attr.INT:
                attr.i = elem
            elif attr.name == "value" and attr.type == attr.TENSOR:
                attr.t.CopyFrom(_zero_tensor(attr.t.name, elem, list(attr.t.dims)))
        if "dtype" in schema.attributes and "dtype" not in present:
            node.attribute.append(oh.make_attribute("dtype", elem))  # RandomNormal, ...
        return
    # Only inputs were retyped: pin outputs whose type would otherwise follow an input.
    first_output = outputs.get(node.output[0]) if node.output else None
    if first_output is None:
        return
    out_elem = first_output.type.tensor_type.elem_type
    if "output_dtype" in schema.attributes and "output_dtype" not in present:
        node.attribute.append(oh.make_attribute("output_dtype", out_elem))  # Q/DQ scales
    elif "dtype" in schema.attributes and "dtype" not in present:
        node.attribute.append(oh.make_attribute("dtype", out_elem))  # Bernoulli


def _control_flow_model(op: str, version: int, elem_name: str) -> onnx.ModelProto:
    """If/Loop/Scan carrying a value of the new type through their body (by Identity)."""
    elem = getattr(TensorProto, elem_name.upper())
    name = f"{op.lower()}_node"
    x = _info("x", elem, [2])
    if op == "If":
        branches = {
            key: oh.make_graph(
                [oh.make_node("Identity", ["x"], [f"{key}_out"])],
                key,
                [],
                [_info(f"{key}_out", elem, [2])],
            )
            for key in ("then_branch", "else_branch")
        }
        node = oh.make_node("If", ["cond"], ["y"], name=name, **branches)
        inputs = [_info("cond", TensorProto.BOOL, []), x]
        outputs = [_info("y", elem, [2])]
    elif op == "Loop":
        body = oh.make_graph(
            [
                oh.make_node("Identity", ["c_in"], ["c_out"]),
                oh.make_node("Identity", ["v_in"], ["v_out"]),
            ],
            "body",
            [
                _info("i", TensorProto.INT64, []),
                _info("c_in", TensorProto.BOOL, []),
                _info("v_in", elem, [2]),
            ],
            [_info("c_out", TensorProto.BOOL, []), _info("v_out", elem, [2])],
        )
        node = oh.make_node("Loop", ["n", "", "x"], ["y"], name=name, body=body)
        inputs = [_info("n", TensorProto.INT64, []), x]
        outputs = [_info("y", elem, [2])]
    else:
        body = oh.make_graph(
            [oh.make_node("Identity", ["s_in"], ["s_out"])],
            "body",
            [_info("s_in", elem, [2])],
            [_info("s_out", elem, [2])],
        )
        node = oh.make_node("Scan", ["x"], ["y"], name=name, body=body, num_scan_inputs=0)
        outputs = [_info("y", elem, [2])]
        inputs = [x]
    return make_model([node], inputs, outputs, version)


def _base_model(op: str, version: int) -> onnx.ModelProto:
    if op == "Optional":
        return _optional_alone(version)
    for case in _testcases_by_op().get(op, ()):
        assert case.model is not None
        model = relabel(case.model, version)
        if is_valid(model):
            return model
    if op in HAND_BUILT:
        return HAND_BUILT[op](version).model
    raise LookupError(f"no one-op model of {op} to retype")


def new_type_model(op: str, version: int) -> tuple[onnx.ModelProto, str, list[str]]:
    """A one-op model of ``op`` at opset ``version`` that uses a type the step added.

    Returns the model (valid at ``version``: checked by the caller), the name of its node,
    and the type strings of the retyped values.
    """
    elem_name = new_elem_type(op, version)
    if op in _CONTROL_FLOW:
        model = _control_flow_model(op, version, elem_name)
        return model, f"{op.lower()}_node", [f"tensor({elem_name})"]
    model = _base_model(op, version)
    del model.graph.value_info[:]
    # Name the node so the refusal can name it.
    name = f"{op.lower()}_node"
    node = next(n for n in model.graph.node if n.op_type == op)
    node.name = name
    retyped = _retype(model, op, version, elem_name)
    return model, name, retyped
