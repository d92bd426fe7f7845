"""Lower a ``ModelProto`` without building the IR, when only the opset label must change.

Most nodes of a real export do not change when the opset drops by one or two: their op
did not change, or the change was only to the types the schema allows (a derived "type
rule" of the registry) and the node's actual types are allowed below. For such a model
the exact lowering is the opset import and ``ir_version`` rewritten, nothing else; the
full pass (:class:`~.lower_opset.LowerOpsetPass`) would deserialize every node into
onnx-ir, find nothing to rewrite, and serialize them again, which is most of the time
of a plain lowering.

Rules:

1. :func:`try_lower_proto` answers True and rewrites ``proto`` only when every
   default-domain node of the main graph steps down to the target through the
   registry's rules (the same lookup as the full pass) of three kinds:

   - derived type rules, each checked on the types the proto declares (graph inputs,
     outputs, ``value_info``, initializers) and, for a value declaring none, on the type
     ONNX's shape inference gives it: the same check on the same types as the full pass;
   - a hand-written adapter whose ``types_only`` test (:mod:`.registry`, next to the
     adapter) says the node needs only the step's type rule (Cast-24 without
     ``round_mode``): that type rule, checked as above, with no IR built;
   - other hand-written adapters (Cast-24 drops ``round_mode``, Attention-24 without
     ``nonpad_kv_seqlen`` keeps the node ...), run as they are on an IR copy of that one
     node, its values carrying their types and shapes as the full pass gives them
     (declared, else inferred; an inferred shape only for the inputs of a step the pass
     lends shapes to), no constant values, every output counted as used: the adapter can
     only be more cautious than in the model; accepted only when the adapter built
     nothing, replaced nothing and at most removed attributes or trailing empty inputs,
     which are then removed from the proto node.

   Inference runs at most once, over the whole graph, only when a value read lacks
   what is read, and on what the full pass's oracle infers from
   (:func:`~.types.weight_free_model_proto`, :func:`~.types.infer_model_types`): the
   graph without ``value_info``, its large initializers as typed inputs, so no weight
   is read or serialized. Its types are those the full pass would read.
2. Anything else leaves ``proto`` untouched and answers False, so that the caller runs
   the full pass: model-local functions, subgraphs (If/Loop/Scan), a type neither
   declared nor inferred (or inference failing), a value declared twice differently, a
   step with a hand-written adapter that changes the node, a node that would be
   refused (the full pass lists the refusals), a model already at the target.
3. The opset import and ``ir_version`` are rewritten by the rule the full pass uses
   (:func:`~.lower_opset.lowered_ir_version`).
"""

from __future__ import annotations

__all__ = ["may_lower_proto", "try_lower_proto"]

import collections
import functools
import logging
from collections.abc import Iterable

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.core.display import shown
from onnxscript_ep_passes.core.onnx_utils import type_string
from onnxscript_ep_passes.lowering import schemas, work
from onnxscript_ep_passes.lowering.context import DowngradeContext, NodeNames, NodeRefusedError
from onnxscript_ep_passes.lowering.lower_opset import (
    ORT_TRACKING_ISSUE,
    default_opset,
    lowered_ir_version,
)
from onnxscript_ep_passes.lowering.registry import DEFAULT_REGISTRY, AdapterEntry, AdapterRegistry
from onnxscript_ep_passes.lowering.types import (
    TypeOracle,
    infer_model_types,
    weight_free_model_proto,
)

logger = logging.getLogger(__name__)

_SUBGRAPH_ATTRIBUTES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
_UNSEEN = "\0unseen"  # no type string: a key not yet looked up


class _Declared:
    """The types the proto declares, by value name (a conflicting name counts as unknown),
    and, for a value declaring none, the type shape inference gives it (rule 1).

    Looked up lazily: a model declares a type for every intermediate value, and only the
    values of the nodes a step changes are ever asked for. Inference runs at most once,
    on the first value that needs it.
    """

    def __init__(self, proto: onnx.ModelProto) -> None:
        graph = proto.graph
        self._model = proto
        infos = [*graph.input, *graph.output, *graph.value_info]
        self._infos = {info.name: info for info in infos}
        self._tensors = {tensor.name: tensor for tensor in graph.initializer}
        self._repeated: set[str] = set()  # declared more than once: compared on lookup
        if len(self._infos) < len(infos):
            counts = collections.Counter(info.name for info in infos)
            self._repeated = {name for name, count in counts.items() if count > 1}
        self._repeated.update(name for name in self._tensors if name in self._infos)
        self._all = infos
        self._protos: dict[str, onnx.TypeProto | None] = {}
        self.strings: dict[str, str | None] = {}  # type_string's memo
        self._seen: dict[tuple[str, bool], tuple[onnx.TypeProto | None, onnx.TypeProto | None]] = {}
        self._keys: dict[tuple[str, bool], bytes] = {}
        self._inferred_types: dict[str, onnx.TypeProto] | None = None

    def proto(self, name: str) -> onnx.TypeProto | None:
        """The type ``name`` is declared with; None when undeclared or declared differently
        twice (then the full pass decides)."""
        if name in self._protos:
            return self._protos[name]
        declared: list[onnx.TypeProto] = []
        if name in self._repeated:
            declared = [info.type for info in self._all if info.name == name]
        elif name in self._infos:
            declared = [self._infos[name].type]
        tensor = self._tensors.get(name)
        if tensor is not None:
            declared.append(onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
        found = declared[0] if declared and all(t == declared[0] for t in declared) else None
        self._protos[name] = found
        return found

    def inferred(self, name: str) -> onnx.TypeProto | None:
        """The type and shape inference gives ``name`` (None for a name declared
        differently twice: the full pass decides). Inference runs over the whole graph
        once, on a weight-free copy of it, as the full pass's oracle runs it; when it
        fails every value is unknown here (the full pass then decides)."""
        if name in self._repeated and self.proto(name) is None:
            return None
        if self._inferred_types is None:
            try:
                weight_free = weight_free_model_proto(self._model)
                self._inferred_types = infer_model_types(weight_free, subgraphs=False)
            except Exception as error:  # the full pass runs it again and reports it
                logger.debug("no shape inference for the proto fast path: %s", error)
                self._inferred_types = {}
        return self._inferred_types.get(name)

    def type_string(self, name: str) -> str | None:
        """The type a type rule reads: the declared one, else the inferred one."""
        found = self.strings.get(name, _UNSEEN)
        if found is not _UNSEEN:
            return found
        if name in self._infos or name in self._tensors:  # a repeated name is one of them
            found = _string_of(self.proto(name))
            if found is None:
                found = _string_of(self.inferred(name))
        else:  # declared nowhere: as inferred() answers, without its checks
            if self._inferred_types is None:
                self.inferred(name)
            assert self._inferred_types is not None
            found = _string_of(self._inferred_types.get(name))
        self.strings[name] = found
        return found

    def _sources(
        self, name: str, lend: bool
    ) -> tuple[onnx.TypeProto | None, onnx.TypeProto | None]:
        """Where value ``name``'s type and shape come from for an adapter, as the full
        pass gives them: the declared type when known, else the inferred one; the
        declared shape, else (``lend``: the pass lends its inputs shapes) the inferred."""
        key = (name, lend)
        if key not in self._seen:
            declared = self.proto(name)
            type_source = declared if _string_of(declared) is not None else self.inferred(name)
            shape_source = declared if _has_shape(declared) else None
            if shape_source is None and lend:
                inferred = self.inferred(name)
                shape_source = inferred if _has_shape(inferred, tensor_only=True) else None
            self._seen[key] = (type_source, shape_source)
        return self._seen[key]

    def key(self, name: str, lend: bool) -> bytes:
        """What an adapter can learn about value ``name`` (its type and shape), as bytes."""
        key = (name, lend)
        if key not in self._keys:
            type_source, shape_source = self._sources(name, lend)
            self._keys[key] = b"\0".join(
                b"-" if source is None else b"+" + source.SerializeToString()
                for source in (type_source, shape_source)
            )
        return self._keys[key]

    def value(self, name: str, lend: bool) -> ir.Value:
        type_source, shape_source = self._sources(name, lend)
        type_ = None
        if type_source is not None:
            type_ = ir.serde.deserialize_type_proto_for_type(type_source)
        shape = None
        if shape_source is not None:
            shape = ir.serde.deserialize_type_proto_for_shape(shape_source)
        return ir.Value(name=name, type=type_, shape=shape)


def _string_of(proto: onnx.TypeProto | None) -> str | None:
    """``type_string`` of the type ``proto`` describes (None: none or unknown)."""
    if proto is None:
        return None
    if proto.WhichOneof("value") == "tensor_type":
        return _tensor_type_string(proto.tensor_type.elem_type)
    return type_string(ir.serde.deserialize_type_proto_for_type(proto))


def _has_shape(proto: onnx.TypeProto | None, *, tensor_only: bool = False) -> bool:
    """Whether ``proto`` gives a value a shape: as ``ir.Value.shape`` reads a declared
    type; ``tensor_only``: as :meth:`~.types.TypeOracle.shape_of` reads an inferred one."""
    if proto is None or (tensor_only and proto.WhichOneof("value") != "tensor_type"):
        return False
    return ir.serde.deserialize_type_proto_for_shape(proto) is not None


@functools.cache
def _tensor_type_string(elem_type: int) -> str | None:
    """``type_string`` of a tensor type proto with element type ``elem_type``."""
    proto = onnx.TypeProto()
    proto.tensor_type.elem_type = elem_type
    return type_string(ir.serde.deserialize_type_proto_for_type(proto))


# A derived type rule's check of one formal parameter: (reads inputs, index, variadic,
# the types allowed below), as :func:`_checks_pass` reads it.
_Check = tuple[bool, int, bool, frozenset[str]]
# One step of an op down to the target: its version, the version below, the registry's
# rule for it and (a derived type rule) the checks it makes.
_Step = tuple[int, int, AdapterEntry, tuple[_Check, ...]]


def _steps_down(
    domain: str, op_type: str, source: int, target: int, registry: AdapterRegistry
) -> list[_Step] | None:
    """The steps of ``op_type`` from ``source`` down to ``target`` (the same lookups as
    the full pass), [] when it is unchanged; None when one has no rule (the full pass
    decides)."""
    start = schemas.since_version(op_type, source, domain)
    if start is None:
        return None
    found: list[_Step] = []
    version = start
    while version > target:
        entry = registry.lookup(domain, op_type, version)
        previous = schemas.since_version(op_type, version - 1, domain)
        if entry is None or previous is None:
            return None
        typed = entry.derived or entry.types_only is not None
        checks = tuple(
            (check.kind == "input", check.index, check.variadic, check.old_allowed)
            for check in (schemas.type_checks(op_type, version, domain) if typed else ())
        )
        found.append((version, previous, entry, checks))
        version = previous
    return found


# What a hand-written adapter did to a node alone: None when the full pass must run it,
# else the attributes it kept (None: all) and the inputs it kept (a count).
_Verdict = tuple[frozenset[str] | None, int] | None


def _adapter_alone(
    node_proto: onnx.NodeProto,
    entry: AdapterEntry,
    steps: tuple[int, int | None, int],
    declared: _Declared,
    verdicts: dict[tuple[object, ...], _Verdict],
) -> bool:
    """Run a hand-written adapter on an IR copy of the node alone (rule 1), and apply
    what it did to ``node_proto``. The verdict depends only on the node's op, attributes
    and declared value types (and which inputs share a value), so nodes alike share one
    run (``verdicts``)."""
    lend = entry.lend_shapes or work.asks_every_shape()  # as the full pass lends shapes
    key = (steps, _signature(node_proto, declared, lend))
    if key not in verdicts:
        verdicts[key] = _run_adapter(node_proto, entry, steps, declared, lend)
    verdict = verdicts[key]
    if verdict is None:
        return False
    kept_attributes, kept_inputs = verdict
    if kept_attributes is not None:
        kept = [a for a in node_proto.attribute if a.name in kept_attributes]
        del node_proto.attribute[:]
        node_proto.attribute.extend(kept)
    del node_proto.input[kept_inputs:]
    return True


def _signature(node: onnx.NodeProto, declared: _Declared, lend: bool) -> tuple[object, ...]:
    """All an adapter can see of ``node`` alone (:func:`_run_adapter`), as a key."""
    bare = onnx.NodeProto(op_type=node.op_type, domain=node.domain, overload=node.overload)
    bare.attribute.extend(node.attribute)
    first: dict[str, int] = {}
    inputs = tuple(
        (first.setdefault(name, index), declared.key(name, lend)) if name else None
        for index, name in enumerate(node.input)
    )
    outputs = tuple((bool(name), declared.key(name, False)) for name in node.output)
    return bare.SerializeToString(), inputs, outputs


def _run_adapter(
    node_proto: onnx.NodeProto,
    entry: AdapterEntry,
    steps: tuple[int, int | None, int],
    declared: _Declared,
    lend: bool,
) -> _Verdict:
    version, previous, target = steps
    values: dict[str, ir.Value] = {}
    inputs = [
        values.setdefault(name, declared.value(name, lend)) if name else None
        for name in node_proto.input
    ]
    node = ir.Node(
        node_proto.domain,
        node_proto.op_type,
        inputs,
        attributes=[ir.serde.deserialize_attribute(a) for a in node_proto.attribute],
        outputs=[declared.value(name, False) for name in node_proto.output],
        name=node_proto.name,
    )
    graph = ir.Graph(
        list(values.values()),
        [v for v in node.outputs if v.name],
        nodes=[node],
        opset_imports={"": version},
    )
    model = ir.Model(graph, ir_version=10)
    before = dict(node.attributes)
    inputs_before = tuple(node.inputs)
    ctx = DowngradeContext(node, version, previous, target, TypeOracle(model), NodeNames(model))
    try:
        result = entry.adapter(node, ctx)
    except NodeRefusedError:
        return None
    if result is not None or ctx.built:
        return None
    after = dict(node.attributes)
    if any(before.get(name) is not attr for name, attr in after.items()):
        return None  # an attribute was added or replaced: the full pass does that
    kept_inputs = tuple(node.inputs)
    if kept_inputs != inputs_before[: len(kept_inputs)] or any(
        v is not None for v in inputs_before[len(kept_inputs) :]
    ):
        return None  # inputs rewired: the full pass does that
    return (frozenset(after) if len(after) != len(before) else None), len(kept_inputs)


# How a node of one op steps down: None (no rule: the full pass decides), its steps (a
# list, [] when unchanged), or, when each step is a derived type rule, those rules'
# checks (a tuple, never empty).
_Plan = list[_Step] | tuple[_Check, ...] | None


def _plan(steps: list[_Step] | None) -> _Plan:
    """``steps`` as :func:`try_lower_proto` walks them (:data:`_Plan`)."""
    if not steps or not all(entry.derived for _, _, entry, _ in steps):
        return steps
    checks = tuple(check for *_, step_checks in steps for check in step_checks)
    return checks or []  # a derived rule without checks changes nothing


def _checks_pass(node: onnx.NodeProto, checks: tuple[_Check, ...], declared: _Declared) -> bool:
    """Whether the node's types pass ``checks``: one step's derived type rule, or those
    of several steps at once (the result is the same in any order: each check must
    pass), the type strings read from the memo first."""
    strings = declared.strings
    type_string = declared.type_string
    for reads_inputs, index, variadic, allowed in checks:
        names = node.input if reads_inputs else node.output
        if variadic:
            selected: Iterable[str] = names[index:]
        elif index < len(names):
            selected = (names[index],)
        else:
            continue
        for name in selected:
            if name:
                found = strings.get(name, _UNSEEN)
                if found is _UNSEEN:
                    found = type_string(name)
                if found not in allowed:
                    return False
    return True


def _node_steps_down(
    node: onnx.NodeProto,
    steps: list[_Step],
    target: int,
    declared: _Declared,
    verdicts: dict[tuple[object, ...], _Verdict],
) -> onnx.NodeProto | bool:
    """False when the full pass must run; else True, or the node as the adapters left
    it (a copy: the proto changes only once every node succeeded)."""
    work = node
    for version, previous, entry, checks in steps:
        if entry.derived or (entry.types_only is not None and entry.types_only(work)):
            if not _checks_pass(work, checks, declared):
                return False
        else:
            if work is node:
                work = onnx.NodeProto()
                work.CopyFrom(node)
            if not _adapter_alone(work, entry, (version, previous, target), declared, verdicts):
                return False
    return True if work is node or work == node else work


def _has_subgraph(nodes: Iterable[onnx.NodeProto]) -> bool:
    """Whether an attribute of one of ``nodes`` holds a graph (or graphs)."""
    for node in nodes:
        for attr in node.attribute:
            if attr.type in _SUBGRAPH_ATTRIBUTES:
                return True
    return False


def may_lower_proto(proto: onnx.ModelProto, target: int) -> bool:
    """Whether :func:`try_lower_proto` can answer True, from the model's header alone:
    an ai.onnx opset above ``target`` and no model-local function (rule 2)."""
    source = default_opset({o.domain: o.version for o in proto.opset_import})
    return source is not None and source > target and not len(proto.functions)


def try_lower_proto(
    proto: onnx.ModelProto, target: int, *, registry: AdapterRegistry | None = None
) -> bool:
    """Lower ``proto`` to ``target`` in place if only its labels change (module rules)."""
    registry = registry or DEFAULT_REGISTRY
    from onnxscript_ep_passes.lowering import adapters  # noqa: F401 - registers them

    if not may_lower_proto(proto, target):
        return False
    source = default_opset({o.domain: o.version for o in proto.opset_import})
    assert source is not None  # may_lower_proto
    graph = proto.graph
    if _has_subgraph(graph.node):
        return False  # before any inference, which is told there is no subgraph
    declared = _Declared(proto)
    plans: dict[tuple[str, str], _Plan] = {}  # (domain, op) -> its steps, or their checks
    edited: list[tuple[onnx.NodeProto, onnx.NodeProto]] = []
    verdicts: dict[tuple[object, ...], _Verdict] = {}
    for node in graph.node:
        key = (node.domain, node.op_type)
        if key not in plans:
            default = schemas.is_default_domain(node.domain)
            plans[key] = _plan(_steps_down(*key, source, target, registry) if default else [])
        plan = plans[key]
        if plan is None:
            return False
        if not plan:
            continue
        if isinstance(plan, tuple):  # derived type rules only
            if not _checks_pass(node, plan, declared):
                return False
            continue
        stepped = _node_steps_down(node, plan, target, declared, verdicts)
        if stepped is False:
            return False
        if isinstance(stepped, onnx.NodeProto):
            edited.append((node, stepped))
    for node, stepped in edited:
        node.CopyFrom(stepped)
    for opset in proto.opset_import:
        if schemas.is_default_domain(opset.domain):
            opset.version = target
    proto.ir_version = lowered_ir_version(
        {o.domain: o.version for o in proto.opset_import}, proto.ir_version
    )
    logger.info(
        "Lowered model '%s' from opset %s to %d (%d nodes rewritten). "
        "Track when this workaround can go: %s",
        shown(graph.name),
        source,
        target,
        len(edited),
        ORT_TRACKING_ISSUE,
    )
    return True
