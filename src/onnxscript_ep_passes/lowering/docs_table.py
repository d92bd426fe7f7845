"""Render the adapter registry as Markdown (the table in ``docs/adapters.md``).

One row per opset step ``(op, v)`` with ``low < v <= high`` that has a rule: the op, the
step (``"24 -> 23"``: the opset the node leaves and the one it is expressed in), the kind
of rule, and what it does (the adapter docstring's first paragraph, or the summary of a
rule derived from ``onnx.defs``, with element types that come wrapped several ways, as in
``optional(seq(tensor(X)))``, listed once). Steps with no rule (nodes there are refused) are listed
after the table. Regenerate the file with ``python tools/gen_adapter_table.py``.
"""

from __future__ import annotations

__all__ = ["REGENERATE_COMMAND", "render_adapter_doc", "render_adapter_table"]

import onnx.defs

from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.registry import DEFAULT_REGISTRY, AdapterEntry, AdapterRegistry

REGENERATE_COMMAND = "python tools/gen_adapter_table.py"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _innermost(type_str: str) -> str:
    while "(" in type_str:
        type_str = type_str[type_str.index("(") + 1 : -1]
    return type_str


def _compact_types(types: frozenset[str]) -> str:
    """'tensor(int4), tensor(uint4)'; or, where the same element types come wrapped several
    ways, 'optional(tensor(X)), seq(tensor(X)), tensor(X) for X in int4, uint4'."""
    wrappers: dict[str, set[str]] = {}
    for type_str in types:
        elem = _innermost(type_str)
        wrappers.setdefault(elem, set()).add(type_str.replace(f"tensor({elem})", "tensor(X)"))
    groups: dict[tuple[str, ...], list[str]] = {}
    for elem, found in wrappers.items():
        groups.setdefault(tuple(sorted(found)), []).append(elem)
    parts = []
    for forms, elems in sorted(groups.items()):
        if len(forms) > 1 and len(elems) > 1:
            parts.append(f"{', '.join(forms)} for X in {', '.join(sorted(elems))}")
        else:
            parts.extend(form.replace("tensor(X)", f"tensor({e})") for e in elems for form in forms)
    return ", ".join(sorted(parts))


def _describe(entry: AdapterEntry) -> str:
    if not entry.derived:
        return entry.description
    diff = schemas.step_diff(entry.op_type, entry.version, entry.domain)
    if not diff.added_types:
        return diff.summary
    added = "; ".join(
        f"{param} +{_compact_types(types)}" for param, types in sorted(diff.added_types.items())
    )
    return f"types added: {added}"


def _registry(registry: AdapterRegistry | None) -> AdapterRegistry:
    if registry is not None:
        return registry
    # Importing the adapters package registers every hand-written adapter.
    from onnxscript_ep_passes.lowering import adapters  # noqa: F401

    return DEFAULT_REGISTRY


def render_adapter_table(
    low: int = 18, high: int | None = None, *, registry: AdapterRegistry | None = None
) -> str:
    """The Markdown table of every rule for steps ``low < v <= high`` (newest first;
    ``high``: the newest opset the installed onnx knows)."""
    registry, high = _registry(registry), _newest(high)
    lines = ["| op | step | kind | what it does |", "| --- | --- | --- | --- |"]
    for entry in registry.entries(low, high):
        step = f"{entry.version} -> {entry.version - 1}"
        lines.append(
            f"| {_cell(entry.op_type)} | {step} | {entry.kind} | {_cell(_describe(entry))} |"
        )
    return "\n".join(lines) + "\n"


def _newest(high: int | None) -> int:
    return onnx.defs.onnx_opset_version() if high is None else high


def _missing(low: int, high: int, registry: AdapterRegistry) -> list[schemas.StepDiff]:
    return sorted(
        (
            diff
            for diff in schemas.schema_steps(low, high)
            if registry.lookup("", diff.op_type, diff.version) is None
        ),
        key=lambda d: (-d.version, d.op_type),
    )


def render_adapter_doc(
    low: int = 18, high: int | None = None, *, registry: AdapterRegistry | None = None
) -> str:
    """The whole of ``docs/adapters.md``: a short introduction, the table, the gaps."""
    registry, high = _registry(registry), _newest(high)
    parts = [
        "# Down-conversion adapters\n",
        "<!-- Generated from the adapter registry: do not edit by hand. "
        f"Regenerate with `{REGENERATE_COMMAND}`. -->\n",
        f"Every ai.onnx schema change with {low} < since_version <= {high} and the rule "
        "that undoes it when a model is lowered one opset step. A *type rule* is derived "
        "from `onnx.defs`: the node is kept as it is when the older schema allows all its "
        "types, and refused otherwise. The other kinds are hand-written adapters "
        "(`src/onnxscript_ep_passes/lowering/adapters/opsetNN.py`): *attribute* drops or "
        "edits an attribute that cannot change the result, *rewrite* and *expansion* replace "
        "the node by an exact equivalent, *refusal* explains why no exact equivalent exists.\n",
        f"This file is generated by `{REGENERATE_COMMAND}` from the registry; run it again "
        "after adding or changing an adapter.\n",
        render_adapter_table(low, high, registry=registry),
    ]
    missing = _missing(low, high, registry)
    if missing:
        lines = [
            "## Steps without a rule\n",
            "Nodes at these schema versions are refused when lowered below them.\n",
        ]
        lines.extend(
            f"- {diff.op_type} {diff.version} -> {diff.version - 1}: {_cell(diff.summary)}"
            for diff in missing
        )
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)
