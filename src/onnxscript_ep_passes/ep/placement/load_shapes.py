"""The shapes ORT knows when it optimizes: its shape inference at load and after each round.

ORT infers every node's output types and shapes when it loads a model (``Graph::Resolve``)
and again after each graph transformer that changed the graph, so a value the model
leaves without a shape (TorchScript exports write no ``value_info`` for intermediate
values) can still be static to ORT's basic optimizations: a ``Shape`` of it folds, and so
does the arithmetic that reads that ``Shape``. This module replays that inference for the
placement prediction. Rules (measured on ORT 1.32):

- The inference is ONNX's schema inference, node by node in topological order, each
  node's inferred shape merged into what the model says (a dimension the model gives is
  kept; one it leaves unknown, or a shape it leaves out, is filled in). The data of
  constant inputs is given to it (initializers, ``Constant`` outputs and values computed
  by folding, of at most :data:`DATA_LIMIT` elements): a ``Reshape`` or ``Pad`` whose
  shape input is constant has a static output.
- Any topological order of the nodes inferred gives the same shapes (the predictor's
  walk, :meth:`LoadShapes.resolve`, need not be ORT's): a node's inference reads only its
  inputs, which only their producers' inference writes, each once per walk, before it;
  a producer the walk leaves out (a node ORT inserts or inlines later) writes nothing.
  The inference memo's contents do not change what a node infers. Folding's walk
  (:meth:`LoadShapes.update`) is ORT's own order: which nodes it infers again depends on it.
- Without data propagation: a shape computed from another value's shape (``Shape`` ->
  ``Gather`` -> ``Mul`` -> ``Concat`` -> ``Reshape``) is not known until that arithmetic
  has been folded (measured: ORT keeps a ``Shape`` of such a ``Reshape`` of a dynamic
  input, whose shape ONNX's ``data_prop=True`` infers statically, at ORT_ENABLE_BASIC,
  for ``Mul`` and ``Div`` alike).
- ORT's constant folding walks the nodes in its topological order and, once it has
  folded a node, infers each later node again just before deciding whether to fold it
  (``ConstantFolding::ApplyImpl`` calls ``Graph::UpdateShapeInference``): one pass folds
  a chain whose shapes become static as it goes.
- Folding computes values: a folded node whose inputs' data are known is evaluated
  (``Shape`` from its input's static shape, every other op by ONNX's reference
  implementation), so the next round's inference reads them, as ORT's reads the
  initializers its folding made. A node that cannot be evaluated leaves its outputs
  without data.
- It runs only on scopes where some node output has no shape in the model: where every
  value has one, ORT's inference learns nothing the predictor's rules read (static
  shapes), except from folded data, which the model's own shapes already state. Within
  a scope, a node is inferred when an output has no shape in the model or an input has
  one the inference or folding learned (a shape, or data); elsewhere the model's shapes
  are taken as they are (a model that spells a shape is read as it spells it), so a
  large exported decoder with a few untyped values costs a few inferences, not one per
  node.
- Only ONNX-domain nodes of the scope's own opset line are inferred; nodes of schema
  bodies ORT inlines while partitioning and nodes ORT inserts are not (they come after).
- One node's inference is cached by everything it reads, as values (the rules of
  :mod:`onnxscript_ep_passes.ep.memo`): the op, its domain and schema version, the
  scope's opset, the attribute values, which outputs the node has, and each input's
  type, dimensions and given data (the serialized tensor). Equal nodes (a decoder's
  blocks), and the same node in the next prediction, are inferred once; a node whose
  attributes cannot be spelled as a key is inferred without the cache. The model's own
  dimensions of a value and a node's attributes are read once per :class:`LoadShapes`
  (the model is not edited while predicted).
"""

from __future__ import annotations

__all__ = ["DATA_LIMIT", "LoadShapes"]

import logging
from collections.abc import Callable, Hashable

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import onnx.shape_inference
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import attributes_key, get_schema
from onnxscript_ep_passes.ep.memo import BoundedCache
from onnxscript_ep_passes.ep.placement import opset_reads
from onnxscript_ep_passes.ep.placement.edits import (
    constant_array,
    ort_topological_order,
    static_shape,
)
from onnxscript_ep_passes.ep.placement.graph import FlatNode, FlatScope, FlatValue
from onnxscript_ep_passes.ep.placement.kernels import inference_node_proto, type_proto

logger = logging.getLogger(__name__)

DATA_LIMIT = 1024
"""The most elements of a constant input whose data is given to the inference."""

_Dims = tuple[int | None, ...]
_Given = tuple[onnx.TensorProto, bytes] | None  # an input's data and its bytes, as given
_INFERRED: BoundedCache[Hashable, tuple[_Dims | None, ...]] = BoundedCache(limit=1 << 14)
"""ONNX's inference of one node, keyed by all it reads (:meth:`LoadShapes._inference_key`);
:func:`~onnxscript_ep_passes.ep.memo.clear_caches` empties it."""


def _model_dims(value: FlatValue) -> _Dims | None:
    ir_value = value.ir_value
    shape = ir_value.shape if ir_value is not None else None
    if shape is None:
        return None
    return tuple(d if isinstance(d, int) else None for d in shape)


def _data(value: FlatValue) -> np.ndarray | None:
    if value.data is not None:
        return value.data
    if value.kind != "initializer" or value.size is None or value.size > DATA_LIMIT:
        return None
    return constant_array(value)


class LoadShapes:
    """ORT's inference on one scope: :meth:`of` runs it at load, :meth:`resolve` after a
    round that changed the graph, :meth:`update` on one node during folding,
    :meth:`evaluate` computes a folded node's outputs."""

    def __init__(self, scope: FlatScope, order: Callable[[], list[FlatNode]] | None = None) -> None:
        self.scope = scope
        self.dims: dict[FlatValue, _Dims | None] = {}
        self._given: dict[FlatValue, _Given] = {}  # an input's data, once
        self._seen: dict[FlatNode, tuple[object, ...]] = {}  # its inputs when last inferred
        self._order = order
        # The model is not edited while predicted: its dims and attributes are read once.
        self._model: dict[FlatValue, _Dims | None] = {}
        self._attributes: dict[ir.Node, Hashable | None] = {}

    @classmethod
    def of(
        cls, scope: FlatScope, order: Callable[[], list[FlatNode]] | None = None
    ) -> LoadShapes | None:
        """The inference at load, or None where it does not run (module docstring).
        ``order``, where given, gives a topological order of the nodes :meth:`resolve`
        infers (any: module docstring); else :meth:`resolve` computes ORT's."""
        if not any(
            o is not None and o.ir_value is not None and o.ir_value.shape is None
            for n in scope.nodes
            for o in n.outputs
        ):
            return None
        shapes = cls(scope, order)
        shapes.resolve()
        return shapes

    def _model_dims(self, value: FlatValue) -> _Dims | None:
        if value in self._model:
            return self._model[value]
        dims = self._model[value] = _model_dims(value)
        return dims

    def _dims_of(self, value: FlatValue) -> _Dims | None:
        if value.shape is not None:
            return value.shape
        if value in self.dims:
            return self.dims[value]
        dims = self._model_dims(value)
        if dims is None and value.kind == "initializer":
            static = static_shape(value)  # a Constant's output: its tensor's shape
            return None if static is None else tuple(static)
        return dims

    def resolve(self) -> int:
        """Infer every node's outputs in ORT's topological order (``Graph::Resolve``); the
        number of values whose shape became static."""
        if self._order is not None:
            order = self._order()
        else:
            nodes = [n for n in self.scope.nodes if not n.inlined_by_ort and not n.inserted]
            order = ort_topological_order(nodes)
        learned = 0
        update = self.update
        for node in order:
            learned += update(node)
        if learned:
            logger.debug("%s: ORT's inference makes %d shapes static", self.scope.name, learned)
        return learned

    def update(self, node: FlatNode) -> int:
        """Infer ``node``'s outputs from what its inputs are now (ORT's
        ``Graph::UpdateShapeInference``); the number of outputs whose shape became static.
        A node whose inputs are what they were at its last inference is not inferred
        again (the same inputs infer the same outputs), nor one whose outputs all have
        the model's shapes and whose inputs are as the model says (module docstring)."""
        # Whether inferring can tell more than the model (an output has no shape in the
        # model, or an input has one the inference or folding learned), then whether the
        # inputs changed, with _dims_of's first case inline (this runs once per node per walk).
        inputs = node.inputs
        for o in node.outputs:
            if o is not None and o.ir_value is not None and o.ir_value.shape is None:
                break
        else:
            dims = self.dims
            for v in inputs:
                if v is not None and (v in dims or v.data is not None or v.shape is not None):
                    break
            else:
                return 0
        dims_of = self._dims_of
        seen = tuple(
            [
                None
                if v is None
                else (id(v), v.shape if v.shape is not None else dims_of(v), v.data is not None)
                for v in inputs
            ]
        )
        if self._seen.get(node) == seen:
            return 0
        self._seen[node] = seen
        learned = 0
        for out, inferred in zip(node.outputs, self._infer(node)):
            if out is None or inferred is None:
                continue
            merged = _merge(self._dims_of(out), inferred)
            if merged != self._model_dims(out):
                self.dims[out] = merged
            if out.shape is None and merged is not None and None not in merged:
                out.shape = tuple(int(d) for d in merged if d is not None)
                learned += 1
        return learned

    def _infer(self, node: FlatNode) -> list[_Dims | None]:
        """ONNX's inference of ``node``'s outputs from what its inputs are now, memoized
        across nodes and predictions by everything it reads (:data:`_INFERRED`)."""
        ir_node = node.node
        if node.domain != "" or ir_node is None or node.since_version is None:
            return [None] * len(node.outputs)
        key = self._inference_key(node, ir_node)
        found = _INFERRED.fetch(key, lambda: tuple(self._run_inference(node, ir_node)))
        reads = opset_reads.active()
        if reads is not None:
            reads.note("load", key, lambda: _load_call(node, ir_node, key, found))
        return list(found)

    def _inference_key(self, node: FlatNode, ir_node: ir.Node) -> Hashable | None:
        """All :meth:`_run_inference` reads of ``node``, as values: the op, its domain and
        its schema's version, the scope's opset, the attributes, which outputs there are and each
        input's type, dimensions and given data (its bytes); None when an attribute
        cannot be spelled (:func:`~onnxscript_ep_passes.core.onnx_utils.attributes_key`)."""
        if ir_node in self._attributes:
            attributes = self._attributes[ir_node]
        else:
            attributes = self._attributes[ir_node] = attributes_key(ir_node)
        if attributes is None:
            return None
        inputs: list[Hashable] = []
        for value in node.inputs:
            if value is None:
                inputs.append(None)
                continue
            given = self._data_proto(value)
            data = None if given is None else given[1]
            inputs.append((value.dtype, self._dims_of(value), data))
        return (
            node.op_type,
            node.domain,
            ir_node.op_type,  # the op the node proto spells (the same, for a model's node)
            node.since_version,
            self.scope.opset,
            attributes,
            tuple(o is not None for o in node.outputs),
            tuple(inputs),
        )

    def _run_inference(self, node: FlatNode, ir_node: ir.Node) -> list[_Dims | None]:
        assert node.since_version is not None
        inputs: list[_Known | None] = []
        for value in node.inputs:
            if value is None:
                inputs.append(None)
                continue
            given = self._data_proto(value)
            inputs.append((value.dtype, self._dims_of(value), None if given is None else given[0]))
        present = tuple(o is not None for o in node.outputs)
        return _inference(
            node.op_type, node.since_version, self.scope.opset, ir_node, inputs, present, node.name
        )

    def _data_proto(self, value: FlatValue) -> _Given:
        """The data the inference is given for ``value`` (module docstring) and its bytes
        (the serialized tensor: type, dimensions and data), made once (a folded value's
        data is set before any node reads it)."""
        if value in self._given:
            return self._given[value]
        array = _data(value)
        given: _Given = None
        if array is not None and array.size <= DATA_LIMIT:
            proto = onnx.numpy_helper.from_array(np.asarray(array))
            given = (proto, proto.SerializeToString())
        if value.data is not None or value.kind != "node":
            self._given[value] = given
        return given

    def evaluate(self, node: FlatNode) -> None:
        """Give ``node``'s outputs the data its folding computes, where it can be."""
        out = node.outputs[0] if node.outputs else None
        if out is None:
            return
        if node.op_type == "Shape":
            data = node.inputs[0]
            dims = None if data is None else static_shape(data)
            if dims is None:
                return
            start, end = _shape_range(node, len(dims))
            out.data = np.asarray(dims[start:end], dtype=np.int64)
            return
        arrays: list[np.ndarray | None] = []
        for value in node.inputs:
            if value is None:
                arrays.append(None)
                continue
            array = _data(value)
            if array is None:
                return
            arrays.append(array)
        reads = opset_reads.active()
        if reads is not None:
            reads.evaluated += 1
        outputs = _run_reference(node, arrays, self.scope.opset)
        if outputs is None:
            return
        for value, array in zip(node.outputs, outputs):
            if value is not None and array is not None:
                value.data = np.asarray(array)
                value.shape = tuple(int(d) for d in value.data.shape)


_Known = tuple[str | None, _Dims | None, onnx.TensorProto | None]  # type, dims, data given


def _inference(
    op_type: str,
    since: int,
    opset: int,
    ir_node: ir.Node,
    inputs: list[_Known | None],
    present: tuple[bool, ...],
    name: str = "",
) -> list[_Dims | None]:
    """ONNX's inference of ``ir_node`` as ``op_type``'s schema at ``opset`` (which must be
    the one of version ``since``) on inputs of these types, dimensions and data."""
    unknown: list[_Dims | None] = [None] * len(present)
    schema = get_schema(op_type, opset or since)
    if schema is None or schema.since_version != since:
        return unknown
    names: list[str] = []
    types: dict[str, onnx.TypeProto] = {}
    data: dict[str, onnx.TensorProto] = {}
    for i, known in enumerate(inputs):
        if known is None:
            names.append("")
            continue
        dtype, dims, given = known
        input_name = f"in{i}"
        names.append(input_name)
        tp = type_proto(dtype) if dtype else None
        if tp is None:
            return unknown
        if dims is not None:
            shape = tp.tensor_type.shape
            shape.Clear()
            for d in dims:
                dim = shape.dim.add()
                if d is not None:
                    dim.dim_value = d
        types[input_name] = tp
        if given is not None:
            data[input_name] = given
    outs = [f"out{i}" if p else "" for i, p in enumerate(present)]
    try:
        proto = inference_node_proto(ir_node, names, outs)
        inferred = onnx.shape_inference.infer_node_outputs(
            schema,
            proto,
            types,
            data,
            opset_imports=[onnx.helper.make_opsetid("", opset)],
        )
    except Exception as error:  # inference is best effort, as ORT's is per node
        logger.debug("no shape inferred for %s (%s): %s", name, ir_node.op_type, error)
        return unknown
    result: list[_Dims | None] = []
    for out in outs:
        tp = inferred.get(out) if out else None
        if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            result.append(None)
            continue
        result.append(
            tuple(
                d.dim_value if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim
            )
        )
    return result


def _load_call(
    node: FlatNode, ir_node: ir.Node, key: Hashable, found: tuple[_Dims | None, ...]
) -> opset_reads.Call:
    """The inference keyed ``key`` (:meth:`LoadShapes._inference_key`: it holds every
    input's type, dimensions and given bytes), to be made again at another opset."""
    assert isinstance(key, tuple)
    present, spelled = key[6], key[7]
    op_type, domain, name = node.op_type, node.domain, node.name  # not the flat node

    def again(opset: int, schema: object, since: int) -> tuple[_Dims | None, ...]:
        inputs: list[_Known | None] = []
        for known in spelled:
            if known is None:
                inputs.append(None)
                continue
            dtype, dims, data = known
            inputs.append(
                (dtype, dims, None if data is None else onnx.TensorProto.FromString(data))
            )
        return tuple(_inference(op_type, since, opset, ir_node, inputs, present, name))

    return opset_reads.Call(op_type, domain, found, again)


def _merge(existing: _Dims | None, inferred: _Dims) -> _Dims | None:
    """ORT's merge of an inferred shape into the one it has: known dimensions are kept."""
    if existing is None:
        return inferred
    if len(existing) != len(inferred):
        return existing
    return tuple(e if e is not None else i for e, i in zip(existing, inferred))


def _shape_range(node: FlatNode, rank: int) -> tuple[int, int]:
    ir_node = node.node
    start, end = 0, rank
    if ir_node is not None:
        start_attr, end_attr = ir_node.attributes.get("start"), ir_node.attributes.get("end")
        if isinstance(start_attr, ir.Attr) and not start_attr.is_ref():
            start = int(start_attr.value)
        if isinstance(end_attr, ir.Attr) and not end_attr.is_ref():
            end = int(end_attr.value)
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = max(0, min(rank, end + rank if end < 0 else end))
    return start, end


def _run_reference(
    node: FlatNode, arrays: list[np.ndarray | None], opset: int
) -> list[np.ndarray | None] | None:
    """``node`` computed by ONNX's reference implementation, or None if it cannot be."""
    import onnx.reference

    ir_node = node.node
    if ir_node is None:
        return None
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(arrays)]
    outs = [f"out{i}" if o is not None else "" for i, o in enumerate(node.outputs)]
    try:
        proto = inference_node_proto(ir_node, names, outs)
        evaluator = onnx.reference.ReferenceEvaluator(proto, opsets={"": opset})
        feeds = {n: a for n, a in zip(names, arrays) if n and a is not None}
        results = evaluator.run([o for o in outs if o], feeds)
    except Exception as error:  # not evaluable here: its outputs stay without data
        logger.debug("cannot evaluate %s (%s): %s", node.name, node.op_type, error)
        return None
    it = iter(results)
    return [next(it) if o else None for o in outs]
