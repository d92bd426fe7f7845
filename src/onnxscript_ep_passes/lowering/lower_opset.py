"""Lower a model's ai.onnx opset, node by node, keeping its meaning exactly.

Rules the pass follows:

1. Every default-domain node whose schema at the source opset is newer than the target
   steps down one since_version at a time. Each step ``(op, v)`` is undone by the rule
   the registry gives for it: a type rule derived from ``onnx.defs`` (the node is valid
   below when its actual types are allowed there) or a hand-written adapter (drops an
   attribute that cannot matter, rewrites the node exactly, or refuses).
2. Nodes an adapter builds are read at the opset the adapter wrote them in and are
   lowered in turn, so a rewrite or a function-body expansion succeeds only when every
   node it produces reaches the target too. An exact copy of a function body expanded
   before is lowered once per run: if lowering one copy changed nothing, later ones are skipped.
3. Every node is reached: the main graph, If/Loop/Scan bodies at any depth, and
   model-local functions (lowered from their own opset import). Functions are kept.
4. All refusals are collected; if there is any, :class:`DowngradeError` lists them all
   and the caller's model is left exactly as it was: every change is journaled and
   undone (adapters change only their node's attributes and inputs, and build new nodes
   through the context), and replaced nodes leave the graph only on success. No copy of
   the model is made, so multi-GB models cost no extra memory.
5. A node an expansion built that ORT's CPU EP has no kernel for at the target (Swish-24
   from SwiGLU-28 in an opset-27 model; Elu on double from Celu-28) is expanded in turn
   through its own ONNX function body, when one exists whose every node means the same
   at the target: the primitive form is what ORT can load. Nodes the user wrote are
   never expanded this way.
6. A default-domain op that ONNX does not define at any opset but ONNX Runtime does
   (SimplifiedLayerNormalization, as ORT GenAI's model builder writes it) is carried
   unchanged: its meaning is ORT's and does not depend on the ai.onnx opset. Such nodes
   are logged (one INFO line). Any other unknown op is refused.
7. Only after every node succeeded are the model's opset imports, per-node version
   overrides and ``ir_version`` relabelled for the target (:mod:`.opset_imports`).
8. A model already at or below the target is left alone (``modified=False``).
9. The result (:class:`LoweringResult`) reports the nodes built, replaced and carried
   (rule 6). :func:`run_lowering` logs at DEBUG only; the pass and :func:`lower_opset`
   add the INFO lines.
"""

from __future__ import annotations

__all__ = [
    "MIN_TARGET_OPSET",
    "ORT_TRACKING_ISSUE",
    "LowerOpsetPass",
    "LoweringResult",
    "default_opset",
    "lower_opset",
    "lowered_ir_version",
    "max_ir_version_for_opset",
    "run_lowering",
]

import dataclasses
import logging
from collections.abc import Sequence
from typing import TypeVar, overload

import onnx
import onnx_ir as ir

from onnxscript_ep_passes.core.display import shown
from onnxscript_ep_passes.errors import DowngradeError, Refusal, built_node_reason
from onnxscript_ep_passes.lowering import context, schemas, work
from onnxscript_ep_passes.lowering.context import DowngradeContext, NodeNames, NodeRefusedError
from onnxscript_ep_passes.lowering.expansion import function_body_version, meaning_changed
from onnxscript_ep_passes.lowering.function_body import expand_function_body
from onnxscript_ep_passes.lowering.journal import Journal, discard
from onnxscript_ep_passes.lowering.opset_imports import (
    default_opset,
    lowered_ir_version,
    max_ir_version_for_opset,
    relabel,
)
from onnxscript_ep_passes.lowering.ort_kernels import cpu_has_kernel, ort_inlines, ort_only
from onnxscript_ep_passes.lowering.registry import DEFAULT_REGISTRY, AdapterRegistry
from onnxscript_ep_passes.lowering.types import TypeOracle

logger = logging.getLogger(__name__)

ORT_TRACKING_ISSUE = "https://github.com/microsoft/onnxruntime/issues/27729"

MIN_TARGET_OPSET = 18

_ModelT = TypeVar("_ModelT", ir.Model, onnx.ModelProto)


class _Lowering:
    """One run of the lowering over a model, changing it in place with an undo journal.

    Replaced nodes stay in their graph, unused, until :meth:`commit`; :meth:`rollback`
    restores the model exactly as it was.
    """

    def __init__(self, model: ir.Model, target: int, registry: AdapterRegistry) -> None:
        self.model = model
        self.target = target
        self.registry = registry
        self.oracle = TypeOracle(model)
        self.names = NodeNames(model)
        self.refusals: list[Refusal] = []
        self._origin: tuple[ir.Node, int, int] | None = None  # model node, since, step: builds
        self.rewritten: set[ir.Node] = set()  # the nodes adapters changed
        self.carried: list[ir.Node] = []  # ops ORT defines and ONNX does not, kept as they are
        self.built_nodes: list[ir.Node] = []  # every node the adapters built, in order
        self.journal = Journal()
        self._dead: list[ir.Node] = []
        self._dead_set: set[ir.Node] = set()
        self._lent_shapes: list[ir.Value] = []
        self._used_initializers: list[tuple[ir.Graph, ir.Value]] = []
        # Body templates whose exact copies lowering leaves as they are (_lower_each_built).
        self._settled: dict[object, bool] = {}
        # The nodes of copies skipped so: no version, no subgraph, never edited after.
        self.plain_nodes: list[ir.Node] = []
        self.versioned = True  # whether a main-graph node had a per-node version (run())

    def run(self) -> None:
        visits, subgraphs, self.versioned = work.visits(self.model, self.target)
        self._used_initializers = [
            (graph, value)
            for graph in (self.model.graph, *subgraphs)
            for value in graph.initializers.values()
            if value.uses()
        ]
        # Types are inferred from the model as written, before the first change.
        self.oracle.prepare(*work.prepared_values(visits, self.target, self.registry))
        for node, opset, label in visits:
            self.lower_node(node, opset, label)

    def commit(self) -> tuple[list[ir.Node], list[ir.Node]]:
        """Remove the replaced nodes; return the built nodes kept and the model's replaced."""
        self._take_back_shapes()
        made = set(self.built_nodes)
        replaced = [node for node in self._dead if node not in made]
        for node in self._dead:
            assert node.graph is not None
            node.graph.remove(node, safe=True)
        self._dead.clear()
        self._dead_set.clear()
        # Initializers only the replaced nodes read are dropped (ORT warns about them).
        for graph, value in self._used_initializers:
            if not value.uses() and not value.is_graph_output() and not value.is_graph_input():
                assert value.name is not None
                graph.initializers.pop(value.name, None)
        return [node for node in self.built_nodes if node.graph is not None], replaced

    def rollback(self) -> None:
        self._take_back_shapes()
        self.journal.rollback()
        self._dead.clear()
        self._dead_set.clear()

    def lower_node(self, node: ir.Node, opset: int, scope: str) -> None:
        start = schemas.since_version(node.op_type, opset, node.domain)
        if start is None and ort_only(node.op_type, node.domain):
            self.carried.append(node)
            return
        if start is None:
            reason = f"no ONNX schema for {node.op_type} at opset {opset}"
            self._refuse(node, opset, opset, reason, scope)
            return
        version = start
        while version > self.target:
            entry = self.registry.lookup(node.domain, node.op_type, version)
            previous = schemas.since_version(node.op_type, version - 1, node.domain)
            if entry is None:
                diff = schemas.step_diff(node.op_type, version, node.domain)
                reason = f"no adapter for this change ({diff.summary})"
                self._refuse(node, start, version, reason, scope)
                return
            if entry.derived and previous is not None:  # a type rule: nothing built or changed
                refused = context.types_refused_below(node, version, previous, self.oracle.type_of)
                if refused is None:
                    version = previous
                    continue
                self._refuse(node, start, version, refused, scope)
                return
            ctx = DowngradeContext(node, version, previous, self.target, self.oracle, self.names)
            changed = self.journal.snapshot_node(node)
            if entry.lend_shapes or work.asks_every_shape():
                self._lend_inferred_shapes(node)
            try:
                result = entry.adapter(node, ctx)
                if result is not None:
                    self._replace(node, result, ctx)
                elif previous is None:
                    raise AssertionError(f"adapter for new op {node.op_type}-{version} kept it")
            except NodeRefusedError as refusal:
                self.journal.built([n for n, _ in ctx.built])
                self._refuse(node, start, version, refusal.reason, scope)
                return
            built = ctx.built
            self.journal.built([n for n, _ in built])
            if built and not entry.lend_shapes:
                raise AssertionError(f"{node.op_type}-{version} is lent no shapes: it builds none")
            self.built_nodes.extend(n for n, _ in built)
            if result is not None or built or changed():
                self.rewritten.add(node)
                logger.debug(
                    "%s: %s '%s' stepped down from %d (%s): %d new nodes",
                    shown(scope),
                    shown(node.op_type),
                    shown(node.name),
                    version,
                    entry.kind,
                    len(built),
                )
            outer, self._origin = self._origin, self._origin or (node, start, version)
            self._lower_each_built(ctx, scope)
            self._origin = outer
            if result is not None:
                return
            assert previous is not None
            version = previous

    def _lend_inferred_shapes(self, node: ir.Node) -> None:
        """Give the node's inputs without a declared shape the inferred one, for the adapter.

        The shapes are taken back at the end (commit or rollback): the lowering adds no
        shape information of its own to the model.
        """
        for value in node.inputs:
            if value is not None and value.shape is None:
                shape = self.oracle.shape_of(value)
                if shape is not None:
                    value.shape = shape
                    self._lent_shapes.append(value)

    def _take_back_shapes(self) -> None:
        for value in self._lent_shapes:
            value.shape = None
        self._lent_shapes.clear()

    def _lower_built(self, node: ir.Node, opset: int, scope: str) -> None:
        """Lower a node an adapter built, and the nodes of the subgraphs it holds."""
        inner = [
            sub
            for attr in node.attributes.values()
            if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
            for graph in (
                attr.as_graphs() if attr.type == ir.AttributeType.GRAPHS else [attr.as_graph()]
            )
            for sub in ir.traversal.RecursiveGraphIterator(graph)
        ]
        if node.graph is not None and schemas.is_default_domain(node.domain):
            self.lower_node(node, opset, scope)
            if node not in self._dead_set and node.graph is not None:
                self._prefer_primitive(node, scope)
        if node in self._dead_set:
            return  # replaced: its subgraphs are gone with it
        for sub in inner:
            if sub.graph is not None and schemas.is_default_domain(sub.domain):
                self.lower_node(sub, opset, scope)

    def _prefer_primitive(self, node: ir.Node, scope: str) -> None:
        """Expand a built node ORT can neither run on its CPU EP nor inline through its body."""
        since = schemas.since_version(node.op_type, self.target, node.domain)
        if since is None:
            return
        body_version = function_body_version(node.op_type, self.target, node.domain)
        if body_version is None or ort_inlines(node.op_type, node.domain, self.target):
            return
        first = node.inputs[0] if node.inputs else None
        type_str = None if first is None else schemas.type_string(self.oracle.type_of(first))
        if cpu_has_kernel(node.op_type, node.domain, since, type_str):
            return
        previous = (
            schemas.since_version(node.op_type, since - 1, node.domain) if since > 1 else None
        )
        ctx = DowngradeContext(node, since, previous, self.target, self.oracle, self.names)
        try:
            values = expand_function_body(ctx, body_version)
            for built, built_opset in ctx.built:
                problem = meaning_changed(built, built_opset, self.target)
                if problem is not None:
                    ctx.refuse(problem)
        except NodeRefusedError as error:
            discard([n for n, _ in ctx.built])
            logger.debug("%s: %s '%s' kept: %s", scope, node.op_type, node.name, error.reason)
            return
        self.journal.built([n for n, _ in ctx.built])
        self.built_nodes.extend(n for n, _ in ctx.built)
        self._replace(node, values, ctx)
        logger.debug(
            "%s: %s '%s' has no ORT CPU kernel at opset %d: expanded into its body",
            scope,
            node.op_type,
            node.name,
            self.target,
        )
        self._lower_each_built(ctx, scope)

    def _lower_each_built(self, ctx: DowngradeContext, scope: str) -> None:
        """Lower the nodes ``ctx`` built, in order; skip an exact copy of a body template
        whose earlier copy's lowering changed nothing (rule 2)."""
        copies = {nodes[0]: (template, nodes) for template, nodes in ctx.copies if nodes}
        built = ctx.built
        index = 0
        while index < len(built):
            node, opset = built[index]
            copy = copies.get(node)
            if copy is None:
                self._lower_built(node, opset, scope)
                index += 1
                continue
            template, nodes = copy
            run = built[index : index + len(nodes)]
            assert [n for n, _ in run] == nodes, "a body copy is built in one run"
            index += len(nodes)
            if self._settled.get(template):
                self.plain_nodes.extend(nodes)
                continue
            before = self._progress()
            for node, opset in run:
                self._lower_built(node, opset, scope)
            self._settled[template] = self._progress() == before

    def _progress(self) -> tuple[int, ...]:
        """What lowering a node can add to (:meth:`_lower_each_built`)."""
        made = (self.refusals, self.rewritten, self.carried, self.built_nodes, self._dead)
        return (*map(len, made), len(self._lent_shapes))

    def _replace(
        self, node: ir.Node, values: Sequence[ir.Value | None], ctx: DowngradeContext
    ) -> None:
        """Point every use of the node's outputs at ``values``; the node is removed on commit."""
        graph = node.graph
        assert graph is not None
        for index, old in enumerate(node.outputs):
            new = values[index] if index < len(values) else None
            if new is None:
                if old.uses() or old.is_graph_output():
                    raise AssertionError(
                        f"adapter for {node.op_type} gave no value for used output {index}"
                    )
                continue
            built = {n for n, _ in ctx.built}
            producer = new.producer()
            if old.is_graph_output() and (producer is None or producer not in built):
                new = ctx.op("Identity", [new])  # a graph output needs a node of its own
                producer = new.producer()
            self._rewire(old, new, graph, rename=producer is not None and producer in built)
        self._dead.append(node)
        self._dead_set.add(node)

    def _rewire(self, old: ir.Value, new: ir.Value, graph: ir.Graph, *, rename: bool) -> None:
        uses = list(old.uses())
        positions = [i for i, out in enumerate(graph.outputs) if out is old]
        old_name, new_name = old.name, new.name
        new_type, new_shape = new.type, new.shape
        if new.type is None:
            new.type = old.type
        if new.shape is None:
            new.shape = old.shape
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        if rename and old_name:
            old.name = None
            new.name = old_name

        def undo() -> None:
            new.name, new.type, new.shape = new_name, new_type, new_shape
            old.name = old_name
            for user, index in uses:
                user.replace_input_with(index, old)
            for position in positions:
                graph.outputs[position] = old

        self.journal.record(undo)

    def _refuse(self, node: ir.Node, since: int, step: int, reason: str, scope: str) -> None:
        if self._origin is not None:  # name the model's node, and what was built from it
            reason = built_node_reason(node.op_type, node.name, since, step, reason)
            node, since, step = self._origin
        where = (node.name or "", node.op_type, node.domain)
        self.refusals.append(Refusal(*where, since, step, self.target, reason, scope))


@dataclasses.dataclass
class LoweringResult(ir.passes.PassResult):
    """What one lowering did (rule 9).

    Attributes:
        source_opset: The model's ai.onnx opset before (None when it imports none).
        target_opset: The opset asked for.
        built: The nodes the adapters built that are in the model now (main graph,
            subgraphs and functions), in the order they were built.
        replaced: The model's nodes the adapters replaced (no longer in the model).
        rewritten: How many of the model's nodes adapters changed or replaced.
        carried: The nodes of default-domain ops ONNX does not define but ORT does
            (rule 6), kept unchanged.
    """

    source_opset: int | None = None
    target_opset: int = 0
    built: tuple[ir.Node, ...] = ()
    replaced: tuple[ir.Node, ...] = ()
    rewritten: int = 0
    carried: tuple[ir.Node, ...] = ()


def run_lowering(
    model: ir.Model, target_opset: int, *, registry: AdapterRegistry | None = None
) -> LoweringResult:
    """Lower ``model`` in place to ``target_opset`` (module docstring), logging at DEBUG only.

    Raises:
        ValueError: ``target_opset`` is below :data:`MIN_TARGET_OPSET`.
        DowngradeError: some node has no exact equivalent at the target (every offending
            node listed); the model is then unchanged.
    """
    if target_opset < MIN_TARGET_OPSET:
        raise ValueError(
            f"target_opset {target_opset} is below {MIN_TARGET_OPSET}, the lowest supported"
        )
    source = default_opset(model.opset_imports)
    lowering = _Lowering(model, target_opset, registry or DEFAULT_REGISTRY)
    if not work.scopes(model, target_opset):
        logger.debug("'%s' is already at or below opset %d", model.graph.name, target_opset)
        return LoweringResult(model, False, source, target_opset)
    try:
        lowering.run()
    except BaseException:
        lowering.rollback()
        raise
    if lowering.refusals:
        lowering.rollback()
        raise DowngradeError(
            lowering.refusals,
            source_opset=source,
            target_opset=target_opset,
            model_name=model.graph.name,
        )
    built, replaced = lowering.commit()
    versioned = work.may_carry_versions(lowering.versioned, built, lowering.plain_nodes)
    relabel(model, target_opset, versions_in_main=versioned)
    done = (tuple(built), tuple(replaced), len(lowering.rewritten), tuple(lowering.carried))
    return LoweringResult(model, True, source, target_opset, *done)


def _announce(result: LoweringResult, ep: str | None = None) -> None:
    if not result.modified:
        return
    logger.info(
        "Lowered model '%s' from opset %s to %d%s (%d nodes rewritten). "
        "Track when this workaround can go: %s",
        shown(result.model.graph.name),
        result.source_opset,
        result.target_opset,
        f" for EP {ep}" if ep else "",
        result.rewritten,
        ORT_TRACKING_ISSUE,
    )
    if result.carried:
        logger.info(
            "Carried %d nodes unchanged whose ops ONNX does not define but ONNX Runtime "
            "does (%s): their meaning does not depend on the ai.onnx opset",
            len(result.carried),
            ", ".join(sorted({node.op_type for node in result.carried})),
        )


class LowerOpsetPass(ir.passes.InPlacePass):
    """Lower the model's ai.onnx opset to ``target_opset``, exactly, or raise.

    See :mod:`onnxscript_ep_passes.lowering.lower_opset` for the rules; the result is a
    :class:`LoweringResult`. Raises :class:`~onnxscript_ep_passes.DowngradeError` (listing
    every offending node) when some node has no exact equivalent at the target; the model
    is then unchanged.
    """

    def __init__(self, target_opset: int, *, registry: AdapterRegistry | None = None) -> None:
        super().__init__()
        if target_opset < MIN_TARGET_OPSET:
            raise ValueError(
                f"target_opset {target_opset} is below {MIN_TARGET_OPSET}, the lowest supported"
            )
        self.target_opset = target_opset
        self.registry = registry or DEFAULT_REGISTRY

    def call(self, model: ir.Model) -> LoweringResult:
        result = run_lowering(model, self.target_opset, registry=self.registry)
        _announce(result)
        return result


@overload
def lower_opset(model: ir.Model, target_opset: int, *, ep: str | None = None) -> ir.Model: ...
@overload
def lower_opset(
    model: onnx.ModelProto, target_opset: int, *, ep: str | None = None
) -> onnx.ModelProto: ...
def lower_opset(model: _ModelT, target_opset: int, *, ep: str | None = None) -> _ModelT:
    """Lower ``model`` to ``target_opset``: an IR model in place, a proto into a new proto.

    ``ep``, when given, is named in the INFO log line.
    """
    if isinstance(model, onnx.ModelProto):
        ir_model = ir.serde.deserialize_model(model)
        _announce(run_lowering(ir_model, target_opset), ep)
        return ir.serde.serialize_model(ir_model)
    _announce(run_lowering(model, target_opset), ep)
    return model
