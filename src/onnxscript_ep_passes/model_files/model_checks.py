"""Checks that a parsed ModelProto is one the tool may read, before anything else reads it.

Rules (each violation raises :class:`~onnxscript_ep_passes.errors.InvalidModelError` with
one line naming the problem, and the node, attribute or tensor where there is one):

* **Versions.** ``ir_version`` is at least 3 (opset imports) and not above what the
  installed onnx knows; every
  imported opset of a domain onnx knows (ai.onnx, ai.onnx.ml, ...) is between 1 and the
  newest version onnx knows, in the model and in each local function; no domain is
  imported twice, and every node's domain is imported by its model or function.
* **IR rules.** Below IR version 4 every initializer is also a graph input.
* **Names and fields onnx's checker requires**: every graph has a name, every node an
  op_type, every initializer a name (onnx-ir would drop a nameless one); the model's
  inputs and outputs have a type; no declared dimension is negative; metadata keys are
  unique; a string tensor holds no raw_data.
* **Graphs.** In every graph and subgraph: each value name is defined once (graph input,
  initializer, node output; an initializer may repeat an input's name), every value a
  node or the graph's outputs read is defined in that graph or an enclosing one, and the
  nodes have no cycle (values a subgraph reads from outside count as node inputs).
  Local functions likewise, and they never call themselves, directly or not; each is
  defined once and none is in the ai.onnx domain (``""``), which belongs to ONNX's
  operators (a local ``Relu`` there would shadow ONNX's).
* **Nodes with an ONNX schema** (default domain, at the opset in force): input and output
  counts within the schema's bounds, only attributes the schema defines, each with the
  schema's type, and every required attribute present. Ops without a schema are left to
  the lowering.
* **Tensors held in the file** hold as many bytes as their type and dimensions need.
* **No sparse tensors** (sparse initializers, ``sparse_value`` attributes): onnx-ir cannot
  carry them and onnx's checker refuses every node that reads a sparse initializer, so
  they are refused by name rather than dropped.
* **External data** is checked by :mod:`.external_data_checks`.

The walk is iterative over graphs; protobuf itself refuses nesting deeper than its limit.
"""

from __future__ import annotations

__all__ = ["check_model_proto", "known_opsets", "node_label", "subgraphs"]

import dataclasses
import functools
import math
from collections.abc import Sequence

import onnx
import onnx.defs
import onnx_ir as ir

from onnxscript_ep_passes.core.onnx_utils import get_schema
from onnxscript_ep_passes.errors import InvalidModelError

_TENSOR_ATTRS = (onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS)
_SPARSE_ATTRS = (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS)
_DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclasses.dataclass(frozen=True)
class _SchemaRules:
    since_version: int
    inputs: tuple[int, int]
    outputs: tuple[int, int]
    attributes: dict[str, int]  # name -> AttributeProto type
    required: frozenset[str]


@functools.cache
def _schema_rules(op_type: str, opset: int) -> _SchemaRules | None:
    schema = get_schema(op_type, opset, "")
    if schema is None:
        return None
    attributes = schema.attributes
    return _SchemaRules(
        schema.since_version,
        (schema.min_input, schema.max_input),
        (schema.min_output, schema.max_output),
        {name: a.type.value for name, a in attributes.items()},  # type: ignore[attr-defined]
        frozenset(name for name, a in attributes.items() if a.required),
    )


@functools.cache
def known_opsets() -> dict[str, int]:
    """The newest opset version the installed onnx knows, per domain ("" for ai.onnx)."""
    versions = {domain: high for domain, (_, high) in onnx.defs.C.schema_version_map().items()}
    versions["ai.onnx"] = versions[""]
    return versions


def _attr_type_name(kind: object) -> str:
    return onnx.AttributeProto.AttributeType.Name(int(kind))  # type: ignore[call-overload]


def subgraphs(
    attributes: Sequence[onnx.AttributeProto],
) -> list[tuple[str, onnx.GraphProto]]:
    """The subgraphs in a node's ``attributes``, with the attribute's name."""
    found: list[tuple[str, onnx.GraphProto]] = []
    for attr in attributes:
        kind = attr.type
        if kind == onnx.AttributeProto.GRAPH or attr.HasField("g"):
            found.append((attr.name, attr.g))
        if kind == onnx.AttributeProto.GRAPHS or attr.graphs:
            found.extend((attr.name, graph) for graph in attr.graphs)
    return found


def node_label(node: onnx.NodeProto, version: int | None = None) -> str:
    name = f"'{node.name}'" if node.name else "<unnamed>"
    op = f"{node.domain}::{node.op_type}" if node.domain not in _DEFAULT_DOMAINS else node.op_type
    return f"node {name} ({op}{'' if version is None else f'-{version}'})"


class _Checker:
    def __init__(self, source: str, ir_version: int) -> None:
        self.source = source
        self.ir_version = ir_version
        self.imported: frozenset[str] = frozenset()  # domains the scope being walked imports
        self.scope = "the model"
        self._free: dict[int, tuple[onnx.GraphProto, frozenset[str]]] = {}

    def fail(self, problem: str) -> InvalidModelError:
        return InvalidModelError(f"{self.source}: {problem}")

    # -- versions --------------------------------------------------------------------

    def opsets(self, imports: list[onnx.OperatorSetIdProto], where: str) -> dict[str, int]:
        known = known_opsets()
        found: dict[str, int] = {}
        for entry in imports:
            newest = known.get(entry.domain)
            label = entry.domain or "ai.onnx"
            if entry.domain in found or (
                entry.domain in _DEFAULT_DOMAINS and found.keys() & set(_DEFAULT_DOMAINS)
            ):
                raise self.fail(f"{where} imports {label} twice")
            if newest is not None and not 1 <= entry.version <= newest:
                raise self.fail(
                    f"{where} imports {label} opset {entry.version}, but the installed onnx "
                    f"{onnx.__version__} knows opsets 1..{newest} of that domain"
                )
            found[entry.domain] = entry.version
        return found

    # -- graphs ----------------------------------------------------------------------

    def free_names(self, graph: onnx.GraphProto) -> frozenset[str]:
        """Names ``graph`` (and its subgraphs) read but do not define."""
        key = id(graph)  # the cache holds the graph too, so the id is not reused
        if key not in self._free:
            defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
            used: set[str] = {o.name for o in graph.output}
            for node in graph.node:
                defined.update(node.output)
                used.update(node.input)
                for _, sub in subgraphs(node.attribute):
                    used |= self.free_names(sub)
            used.discard("")
            self._free[key] = (graph, frozenset(used - defined))
        return self._free[key][1]

    def graph(
        self,
        graph: onnx.GraphProto,
        where: str,
        outer: frozenset[str],
        opset: int | None,
        pending: list[tuple[onnx.GraphProto, str, frozenset[str], int | None]],
    ) -> None:
        nodes = graph.node
        # name -> its producer's index; -1 graph input, -2 initializer
        defined: dict[str, int] = {}

        def define(name: str, producer: int) -> None:
            if name in defined:
                first, second = (self._definer(nodes, i) for i in (defined[name], producer))
                raise self.fail(
                    f"value '{name}' is defined twice in {where}: by {first} and by {second}"
                )
            if name:
                defined[name] = producer

        if not graph.name:
            raise self.fail(f"{where} has no name (onnx's checker requires one)")
        for values in (graph.input, graph.output, graph.value_info):
            for value in values:
                tensor = value.type.tensor_type
                if tensor.HasField("shape") and any(
                    d.HasField("dim_value") and d.dim_value < 0 for d in tensor.shape.dim
                ):
                    dims = [
                        d.dim_value if d.HasField("dim_value") else d.dim_param or "?"
                        for d in tensor.shape.dim
                    ]
                    raise self.fail(
                        f"value '{value.name}' in {where} has a negative dimension {dims}"
                    )
        for value in graph.input:
            define(value.name, -1)
        for index, tensor in enumerate(graph.initializer):
            if not tensor.name:
                raise self.fail(f"initializer #{index} in {where} has no name")
            if defined.get(tensor.name) != -1:  # an initializer may repeat an input's name
                if self.ir_version < 4:
                    raise self.fail(
                        f"initializer '{tensor.name}' in {where} is not a graph input, which "
                        f"IR version {self.ir_version} requires (IR 4 lifted the rule)"
                    )
                define(tensor.name, -2)
            self.tensor(tensor, f"initializer '{tensor.name}' in {where}")
        for sparse in graph.sparse_initializer:
            raise self.fail(
                f"sparse initializer '{sparse.values.name}' in {where} is not supported: "
                "onnx's checker refuses every node that reads one, so no valid output can "
                "hold it; store it as a dense initializer"
            )
        for index, node in enumerate(nodes):
            for name in node.output:
                if name in defined:
                    define(name, index)  # raises
                if name:
                    defined[name] = index
        visible = outer | defined.keys()
        in_order = True  # every node reads only values defined before it
        for index, node in enumerate(nodes):
            for name in node.input:
                producer = defined.get(name, -1)
                if producer >= index:
                    in_order = False
                elif producer == -1 and name and name not in visible:
                    label = f"{node_label(node)} in {where}"
                    raise self.fail(f"{label} reads '{name}', which nothing defines")
            attributes = node.attribute
            if attributes:
                for attr_name, sub in subgraphs(attributes):
                    if any(defined.get(n, -1) >= index for n in self.free_names(sub)):
                        in_order = False
                    label = f"{node_label(node)} in {where}"
                    pending.append((sub, f"subgraph '{attr_name}' of {label}", visible, opset))
            self.node(node, attributes, where, opset)
        for value in graph.output:
            if value.name not in visible:
                raise self.fail(f"output '{value.name}' of {where} is not defined anywhere")
        if not in_order:
            self.acyclic(graph, defined, where)

    @staticmethod
    def _definer(nodes: Sequence[onnx.NodeProto], producer: int) -> str:
        names = {-1: "a graph input", -2: "an initializer"}
        return names[producer] if producer < 0 else node_label(nodes[producer])

    def acyclic(self, graph: onnx.GraphProto, defined: dict[str, int], where: str) -> None:
        """Kahn's algorithm over the nodes, for graphs not already in topological order."""
        reads: list[set[int]] = []
        for node in graph.node:
            names = set(node.input)
            for _, sub in subgraphs(node.attribute):
                names |= self.free_names(sub)
            reads.append({defined[n] for n in names if defined.get(n, -1) >= 0})
        users: list[list[int]] = [[] for _ in reads]
        waiting = [len(r) for r in reads]
        for index, producers in enumerate(reads):
            for producer in producers:
                users[producer].append(index)
        ready = [index for index, count in enumerate(waiting) if count == 0]
        done = 0
        while ready:
            index = ready.pop()
            done += 1
            for user in users[index]:
                waiting[user] -= 1
                if waiting[user] == 0:
                    ready.append(user)
        if done != len(reads):
            stuck = next(i for i, count in enumerate(waiting) if count)
            raise self.fail(
                f"{where} has a cycle: {node_label(graph.node[stuck])} depends on its own output"
            )

    # -- nodes and tensors -----------------------------------------------------------

    def node(
        self,
        node: onnx.NodeProto,
        attributes: Sequence[onnx.AttributeProto],
        where: str,
        opset: int | None,
    ) -> None:
        """Check ``node`` (its ``attributes``, read once by the caller) against its schema."""
        for attr in attributes:
            if attr.type in _SPARSE_ATTRS or attr.HasField("sparse_tensor") or attr.sparse_tensors:
                raise self.fail(
                    f"attribute '{attr.name}' of {node_label(node)} in {where} holds a sparse "
                    "tensor, which the tool cannot carry; store it dense (Constant's 'value')"
                )
            if attr.type in _TENSOR_ATTRS:
                label = f"attribute '{attr.name}' of {node_label(node)} in {where}"
                for tensor in (
                    (attr.t,) if attr.type == onnx.AttributeProto.TENSOR else attr.tensors
                ):
                    self.tensor(tensor, label)
        if not node.op_type:
            raise self.fail(f"{node_label(node)} in {where} has no op_type")
        domain = node.domain
        if domain not in self.imported and (
            domain not in _DEFAULT_DOMAINS or not self.imported & set(_DEFAULT_DOMAINS)
        ):
            raise self.fail(
                f"{node_label(node)} in {where} is in domain '{domain or 'ai.onnx'}', "
                f"which {self.scope} does not import (no opset_import entry)"
            )
        if (domain and domain != "ai.onnx") or opset is None:
            return
        schema = _schema_rules(node.op_type, opset)
        if schema is None:
            return  # not an ONNX op at this opset: the lowering decides
        inputs = node.input
        given = len(inputs)
        while given and not inputs[given - 1]:
            given -= 1
        low, high = schema.inputs
        outputs = len(node.output)
        problem = None
        if not low <= given <= high:
            problem = f" has {given} inputs; its schema takes {low}..{high}"
        elif not schema.outputs[0] <= outputs <= schema.outputs[1]:
            problem = (
                f" has {outputs} outputs; its schema gives {schema.outputs[0]}..{schema.outputs[1]}"
            )
        names = set()
        known = schema.attributes
        for attr in attributes:
            if problem:
                break
            name = attr.name
            names.add(name)
            expected = known.get(name)
            if expected is None:
                problem = f" has attribute '{name}', which its schema lacks"
            elif attr.type != expected and not attr.ref_attr_name:
                problem = (
                    f": attribute '{name}' is {_attr_type_name(attr.type)}, "
                    f"the schema wants {_attr_type_name(expected)}"
                )
        if not problem and schema.required and not schema.required <= names:
            missing = schema.required - names
            problem = f" lacks required attribute '{sorted(missing)[0]}'"
        if problem:
            label = f"{node_label(node, schema.since_version)} in {where}"
            raise self.fail(label + problem)

    def tensor(self, tensor: onnx.TensorProto, label: str) -> None:
        if any(d < 0 for d in tensor.dims):
            raise self.fail(f"{label} has a negative dimension {list(tensor.dims)}")
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            return  # see check_external_data
        try:
            dtype = ir.DataType(tensor.data_type)
        except ValueError:
            raise self.fail(f"{label} has unknown data type {tensor.data_type}") from None
        if dtype == ir.DataType.STRING and tensor.HasField("raw_data"):
            raise self.fail(
                f"{label} is a string tensor holding raw_data (strings go in string_data)"
            )
        if dtype in (ir.DataType.STRING, ir.DataType.UNDEFINED):
            return
        count = math.prod(tensor.dims)
        if tensor.HasField("raw_data"):
            need = math.ceil(count * dtype.bitwidth / 8)
            if len(tensor.raw_data) != need:
                raise self.fail(
                    f"{label} is {dtype.name.lower()}{list(tensor.dims)} ({need} bytes) "
                    f"but holds {len(tensor.raw_data)} bytes"
                )
            return
        fields = (
            tensor.float_data,
            tensor.int32_data,
            tensor.int64_data,
            tensor.double_data,
            tensor.uint64_data,
        )
        if count and not any(len(field) for field in fields):
            raise self.fail(f"{label} is {dtype.name.lower()}{list(tensor.dims)} but holds no data")

    # -- functions -------------------------------------------------------------------

    def functions(self, model: onnx.ModelProto) -> None:
        local: dict[tuple[str, str, str], onnx.FunctionProto] = {}
        for function in model.functions:
            key = (function.domain, function.name, function.overload)
            where = f"local function '{key[0]}::{key[1]}'"
            if key in local:
                raise self.fail(f"{where} is defined twice")
            if function.domain in _DEFAULT_DOMAINS:
                raise self.fail(
                    f"local function '{function.name}' is in the ai.onnx domain "
                    f"('{function.domain}'), which belongs to ONNX's own operators; "
                    "put it in a domain of its own"
                )
            local[key] = function
        calls: dict[tuple[str, str, str], set[tuple[str, str, str]]] = {}
        for key, function in local.items():
            where = f"function '{key[0]}::{key[1]}'"
            opsets = self.opsets(list(function.opset_import), where)
            self.imported, self.scope = frozenset(opsets), where
            opset = opsets.get("", opsets.get("ai.onnx"))
            graph = onnx.GraphProto(name=where, node=function.node)
            graph.input.extend(onnx.ValueInfoProto(name=n) for n in function.input)
            graph.output.extend(onnx.ValueInfoProto(name=n) for n in function.output)
            self.walk(graph, where, opset)
            called: set[tuple[str, str, str]] = set()
            stack = [graph]
            while stack:
                for node in stack.pop().node:
                    target = (node.domain, node.op_type, node.overload)
                    if target in local:
                        called.add(target)
                    stack.extend(sub for _, sub in subgraphs(node.attribute))
            calls[key] = called
        self.no_recursion(calls)

    def no_recursion(self, calls: dict[tuple[str, str, str], set[tuple[str, str, str]]]) -> None:
        state: dict[tuple[str, str, str], int] = {}  # 1: on the path, 2: done
        for root in calls:
            if state.get(root):
                continue
            path = [root]
            iters = [iter(sorted(calls[root]))]
            state[root] = 1
            while iters:
                callee = next(iters[-1], None)
                if callee is None:
                    state[path.pop()] = 2
                    iters.pop()
                    continue
                if state.get(callee) == 1:
                    cycle = [*path[path.index(callee) :], callee]
                    chain = " -> ".join(f"{d}::{n}" for d, n, _ in cycle)
                    raise self.fail(
                        f"local function '{callee[0]}::{callee[1]}' calls itself ({chain})"
                    )
                if not state.get(callee):
                    state[callee] = 1
                    path.append(callee)
                    iters.append(iter(sorted(calls[callee])))

    def walk(self, graph: onnx.GraphProto, where: str, opset: int | None) -> None:
        pending: list[tuple[onnx.GraphProto, str, frozenset[str], int | None]] = [
            (graph, where, frozenset(), opset)
        ]
        while pending:
            self.graph(*pending.pop(), pending)


def check_model_proto(model: onnx.ModelProto, source: str) -> None:
    """Raise InvalidModelError when ``model`` breaks a rule of the module docstring.

    ``source`` names the file in messages.
    """
    checker = _Checker(source, model.ir_version)
    if not model.HasField("graph"):
        raise checker.fail("not an ONNX model (no graph)")
    if model.ir_version < 3:  # opset imports came with IR version 3
        raise checker.fail(f"not an ONNX model this tool reads (IR version {model.ir_version})")
    if model.ir_version > onnx.IR_VERSION:
        raise checker.fail(
            f"IR version {model.ir_version} is newer than the installed onnx "
            f"{onnx.__version__} knows ({onnx.IR_VERSION})"
        )
    keys = [entry.key for entry in model.metadata_props]
    if len(set(keys)) != len(keys):
        twice = next(key for key in keys if keys.count(key) > 1)
        raise checker.fail(f"metadata_props key '{twice}' appears more than once")
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for value in values:
            if not value.HasField("type"):
                raise checker.fail(f"{kind} '{value.name}' of the model has no type")
    opsets = checker.opsets(list(model.opset_import), "the model")
    checker.imported = frozenset(opsets)
    checker.walk(model.graph, f"graph '{model.graph.name}'", opsets.get("", opsets.get("ai.onnx")))
    checker.functions(model)
