"""What ONNX's own schemas say changed at each opset step (read from ``onnx.defs``).

A *step* ``(op, v)`` is the change from the schema in force just below ``v`` (its
since_version is ``previous``) to the schema with since_version ``v``. Steps are
classified mechanically:

* ``"new"``: the operator did not exist before ``v``.
* ``"type_only"``: inputs, outputs and attributes are identical and the type
  constraints only grew (or only shrank). Such a step is undone when the node's actual
  types are all allowed by the older schema (always, when types were only removed).
* ``"other"``: anything else (an attribute or input added, semantics changed with the
  same signature, types removed). These need a hand-written adapter.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_DOMAINS",
    "StepDiff",
    "StepKind",
    "TypeCheck",
    "get_schema",
    "is_default_domain",
    "schema_steps",
    "since_version",
    "step_diff",
    "type_checks",
    "type_string",
]

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any, Literal

import onnx
import onnx.defs

from onnxscript_ep_passes.core.onnx_utils import get_schema, type_string

DEFAULT_DOMAINS = frozenset({"", "ai.onnx"})


def is_default_domain(domain: str) -> bool:
    return domain in DEFAULT_DOMAINS


@functools.cache
def since_version(op_type: str, opset: int, domain: str = "") -> int | None:
    """The since_version of the schema of ``op_type`` in force at ``opset``."""
    schema = get_schema(op_type, opset, domain)
    return None if schema is None else schema.since_version


StepKind = Literal["new", "type_only", "other"]


@dataclasses.dataclass(frozen=True)
class StepDiff:
    """How schema ``op_type``-``version`` differs from the one before it.

    ``details`` are for people; decisions read ``kind``, ``added_types`` and
    ``removed_types``.
    """

    op_type: str
    version: int
    previous: int | None
    kind: StepKind
    # For each type parameter (of both schemas) whose allowed set grew: the types the
    # older schema allows, and the types the step added.
    old_allowed: dict[str, frozenset[str]]
    added_types: dict[str, frozenset[str]]
    details: tuple[str, ...]
    # For each type parameter whose allowed set shrank: the types the step removed.
    removed_types: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)

    @property
    def summary(self) -> str:
        if self.kind == "type_only" and not self.added_types:
            return "; ".join(self.details)
        if self.kind == "type_only":
            added = "; ".join(
                f"{param} +{', '.join(sorted(types))}"
                for param, types in sorted(self.added_types.items())
            )
            return f"types added: {added}"
        return "; ".join(self.details)


def _signature(schema: onnx.defs.OpSchema) -> tuple[object, ...]:
    def formal(p: onnx.defs.OpSchema.FormalParameter) -> tuple[object, ...]:
        return (p.name, p.type_str, p.option, p.is_homogeneous, p.min_arity)

    attrs = {
        name: (a.type, a.required, a.default_value.SerializeToString())
        for name, a in schema.attributes.items()
    }
    return (
        tuple(formal(p) for p in schema.inputs),
        tuple(formal(p) for p in schema.outputs),
        tuple(sorted(attrs.items())),
        schema.min_input,
        schema.max_input,
        schema.min_output,
        schema.max_output,
    )


def _constraints(schema: onnx.defs.OpSchema) -> dict[str, frozenset[str]]:
    return {t.type_param_str: frozenset(t.allowed_type_strs) for t in schema.type_constraints}


def _describe(old: onnx.defs.OpSchema, new: onnx.defs.OpSchema) -> tuple[str, ...]:
    details: list[str] = []
    old_in = [p.name for p in old.inputs]
    new_in = [p.name for p in new.inputs]
    if old_in != new_in:
        details.append(f"inputs {old_in} -> {new_in}")
    added_attrs = sorted(set(new.attributes) - set(old.attributes))
    removed_attrs = sorted(set(old.attributes) - set(new.attributes))
    if added_attrs:
        details.append(f"attributes added: {', '.join(added_attrs)}")
    if removed_attrs:
        details.append(f"attributes removed: {', '.join(removed_attrs)}")
    oc, nc = _constraints(old), _constraints(new)
    for param in sorted(set(oc) | set(nc)):
        plus = nc.get(param, frozenset()) - oc.get(param, frozenset())
        minus = oc.get(param, frozenset()) - nc.get(param, frozenset())
        if plus:
            details.append(f"{param} types added: {', '.join(sorted(plus))}")
        if minus:
            details.append(f"{param} types removed: {', '.join(sorted(minus))}")
    if not details:
        details.append("same signature, different semantics or function body")
    return tuple(details)


@functools.cache
def step_diff(op_type: str, version: int, domain: str = "") -> StepDiff:
    """Classify the change that schema ``op_type``-``version`` made (see module docstring)."""
    new = get_schema(op_type, version, domain)
    if new is None or new.since_version != version:
        raise ValueError(f"{op_type}-{version} is not a schema version in domain '{domain}'")
    previous = since_version(op_type, version - 1, domain) if version > 1 else None
    if previous is None:
        return StepDiff(op_type, version, None, "new", {}, {}, ("operator introduced",))
    old = get_schema(op_type, previous, domain)
    assert old is not None
    details = _describe(old, new)
    oc, nc = _constraints(old), _constraints(new)
    old_sig, new_sig = _signature(old), _signature(new)
    same_params = set(oc) == set(nc)
    widened_only = same_params and all(oc[p] <= nc[p] for p in oc)
    narrowed_only = same_params and all(nc[p] <= oc[p] for p in oc)
    added = {p: nc[p] - oc[p] for p in nc if p in oc and nc[p] - oc[p]}
    removed = {p: oc[p] - nc[p] for p in oc if p in nc and oc[p] - nc[p]}
    old_allowed = {p: oc[p] for p in added}
    if old_sig == new_sig and (widened_only or narrowed_only) and oc != nc:
        # Narrowing (types removed) needs no check: the older schema allows more.
        return StepDiff(
            op_type, version, previous, "type_only", old_allowed, added, details, removed
        )
    return StepDiff(op_type, version, previous, "other", old_allowed, added, details, removed)


@dataclasses.dataclass(frozen=True)
class TypeCheck:
    """One formal parameter whose allowed types grew at a step."""

    kind: Literal["input", "output"]
    index: int
    variadic: bool
    old_allowed: frozenset[str]


@functools.cache
def type_checks(op_type: str, version: int, domain: str = "") -> tuple[TypeCheck, ...]:
    """The formal inputs/outputs whose types step ``op_type``-``version`` widened."""
    diff = step_diff(op_type, version, domain)
    if not diff.old_allowed:
        return ()
    schema = get_schema(op_type, version, domain)
    assert schema is not None
    checks: list[TypeCheck] = []
    sides: tuple[tuple[Literal["input", "output"], Any], ...] = (
        ("input", schema.inputs),
        ("output", schema.outputs),
    )
    for kind, formals in sides:
        for index, formal in enumerate(formals):
            allowed = diff.old_allowed.get(formal.type_str)
            if allowed is not None:
                variadic = formal.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
                checks.append(TypeCheck(kind, index, variadic, allowed))
    return tuple(checks)


def schema_steps(low: int, high: int, domain: str = "") -> Iterator[StepDiff]:
    """Every schema change with ``low < since_version <= high`` in ``domain``."""
    seen: set[tuple[str, int]] = set()
    for schema in onnx.defs.get_all_schemas_with_history():
        if (schema.domain or "") != ("" if is_default_domain(domain) else domain):
            continue
        key = (schema.name, schema.since_version)
        if low < schema.since_version <= high and key not in seen:
            seen.add(key)
            yield step_diff(schema.name, schema.since_version, domain)
