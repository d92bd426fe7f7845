"""The down-conversion adapter registry, keyed by (domain, op_type, version).

An entry undoes the change that schema ``op_type``-``version`` made relative to the
schema in force just below it. Rules:

* Hand-written adapters are registered with :func:`register_downgrade`, one module per
  opset step (``adapters/opset24.py`` undoes what opset 24 changed).
* Type-only steps (see :mod:`.schemas`) need no hand-written code: :meth:`AdapterRegistry.lookup`
  derives their rule from ``onnx.defs``. A hand-written adapter for the same key wins.
* An adapter receives the node and a :class:`~.context.DowngradeContext`. It returns
  ``None`` when the node (possibly with attributes edited) is valid at the older schema,
  or the values that replace the node's outputs, built with the context; it calls
  ``ctx.refuse(reason)`` when no exact equivalent exists.
* Before a hand-written adapter runs, the pass gives its node's inputs that declare no
  shape the inferred one. An adapter registered with ``lend_shapes=False`` reads no
  shape and builds no node (it edits attributes, checks types, or refuses): it is lent
  none, and the model-wide inference need not run for it. Type rules are lent none.
* An adapter may come with ``types_only``, a test of the node as a ``NodeProto`` (next to
  the adapter, its docstring naming the schema change): True when that node needs no
  more than the step's type rule, i.e. the adapter would check the node's types
  against the older schema and change nothing. The proto fast path
  (:mod:`.proto_fast_path`) then applies the type rule to the proto and builds no IR for
  the node; the full pass always runs the adapter.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_REGISTRY",
    "Adapter",
    "AdapterEntry",
    "AdapterKind",
    "AdapterRegistry",
    "TypesOnly",
    "register_downgrade",
]

import dataclasses
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal

import onnx_ir as ir

from onnxscript_ep_passes.lowering import schemas

if TYPE_CHECKING:
    import onnx

    from onnxscript_ep_passes.lowering.context import DowngradeContext

Adapter = Callable[[ir.Node, "DowngradeContext"], "Sequence[ir.Value | None] | None"]

TypesOnly = Callable[["onnx.NodeProto"], bool]
"""True when the node (a proto) needs only its step's type rule (module docstring)."""

AdapterKind = Literal["type rule", "attribute", "rewrite", "expansion", "refusal"]


@dataclasses.dataclass(frozen=True)
class AdapterEntry:
    """One rule of the registry."""

    domain: str
    op_type: str
    version: int
    adapter: Adapter
    kind: AdapterKind
    derived: bool
    lend_shapes: bool = True  # False: reads no shape, builds no node (module docstring)
    types_only: TypesOnly | None = None  # the node needs only the type rule (docstring)

    @property
    def description(self) -> str:
        """The first paragraph of the adapter's docstring (the change it undoes)."""
        if self.derived:
            return schemas.step_diff(self.op_type, self.version, self.domain).summary
        doc = inspect.getdoc(self.adapter) or ""
        return " ".join(doc.split("\n\n", 1)[0].split())


class AdapterRegistry:
    """Hand-written adapters plus the type rules derived from ``onnx.defs``."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, int], AdapterEntry] = {}
        self._derived: dict[tuple[str, str, int], AdapterEntry | None] = {}

    def register(
        self,
        op_type: str,
        version: int,
        adapter: Adapter,
        *,
        domain: str = "",
        kind: AdapterKind,
        lend_shapes: bool = True,
        types_only: TypesOnly | None = None,
        replace: bool = False,
    ) -> None:
        """Add the adapter undoing ``op_type``-``version``; one for that step already
        registered is refused unless ``replace``."""
        domain = "" if schemas.is_default_domain(domain) else domain
        key = (domain, op_type, version)
        if key in self._entries and not replace:
            raise ValueError(
                f"an adapter for {op_type}-{version} is already registered "
                "(replace=True replaces it, in a registry of your own: DEFAULT_REGISTRY.copy())"
            )
        schema = schemas.get_schema(op_type, version, domain)
        if schema is None or schema.since_version != version:
            raise ValueError(f"{op_type}-{version} is not a schema version in ONNX")
        self._entries[key] = AdapterEntry(
            domain,
            op_type,
            version,
            adapter,
            kind,
            derived=False,
            lend_shapes=lend_shapes,
            types_only=types_only,
        )

    def copy(self) -> AdapterRegistry:
        """A registry with the same adapters, to add or replace some without changing this
        one (``DEFAULT_REGISTRY.copy()``; pass it as ``LowerOpsetPass(..., registry=)``)."""
        other = AdapterRegistry()
        other._entries = dict(self._entries)
        return other

    def lookup(self, domain: str, op_type: str, version: int) -> AdapterEntry | None:
        """The rule that undoes step ``op_type``-``version``, or None when there is none."""
        domain = "" if schemas.is_default_domain(domain) else domain
        key = (domain, op_type, version)
        entry = self._entries.get(key)
        if entry is not None:
            return entry
        if key not in self._derived:
            self._derived[key] = self._derive(domain, op_type, version)
        return self._derived[key]

    @staticmethod
    def _derive(domain: str, op_type: str, version: int) -> AdapterEntry | None:
        diff = schemas.step_diff(op_type, version, domain)
        if diff.kind != "type_only":
            return None
        return AdapterEntry(
            domain, op_type, version, _type_rule, "type rule", derived=True, lend_shapes=False
        )

    def handwritten(self) -> Iterator[AdapterEntry]:
        yield from sorted(self._entries.values(), key=lambda e: (-e.version, e.op_type))

    def entries(self, low: int, high: int, domain: str = "") -> Iterator[AdapterEntry]:
        """Every rule (hand-written or derived) for steps with ``low < version <= high``."""
        for diff in sorted(
            schemas.schema_steps(low, high, domain), key=lambda d: (-d.version, d.op_type)
        ):
            entry = self.lookup(domain, diff.op_type, diff.version)
            if entry is not None:
                yield entry


def _type_rule(node: ir.Node, ctx: DowngradeContext) -> None:
    """The older schema accepts the node when all its tensor types are allowed there.

    The pass applies a derived entry's rule itself, without a context (the same check).
    """
    ctx.require_types_allowed_below()


DEFAULT_REGISTRY = AdapterRegistry()


def register_downgrade(
    op_type: str,
    from_version: int,
    domain: str = "",
    *,
    kind: AdapterKind = "rewrite",
    registry: AdapterRegistry | None = None,
    lend_shapes: bool = True,
    types_only: TypesOnly | None = None,
    replace: bool = False,
) -> Callable[[Adapter], Adapter]:
    """Register an adapter that undoes the change made by schema ``op_type``-``from_version``.

    ``lend_shapes=False`` only for an adapter that reads no shape and builds no node;
    ``types_only``: the proto-level test of a node that needs only the step's type rule
    (module docstring); ``replace=True`` replaces the registry's adapter for that step (use a registry of your
    own, ``DEFAULT_REGISTRY.copy()``, to leave the package's as they are).

    Example::

        @register_downgrade("Swish", 24, kind="expansion")
        def swish(node, ctx):
            \"\"\"Swish-24 is new: expand it through its ONNX function body.\"\"\"
            return ctx.expand_function()
    """

    def decorator(adapter: Adapter) -> Adapter:
        (registry or DEFAULT_REGISTRY).register(
            op_type,
            from_version,
            adapter,
            domain=domain,
            kind=kind,
            lend_shapes=lend_shapes,
            types_only=types_only,
            replace=replace,
        )
        return adapter

    return decorator
