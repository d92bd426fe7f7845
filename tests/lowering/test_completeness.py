"""Every ai.onnx schema change in opsets 19..28 has a rule, and the docs table says so.

* A step ``(op, v)`` is covered when the registry has a rule for it: a type rule derived
  from ``onnx.defs`` or a hand-written adapter (which may be a documented refusal).
* ``docs/adapters.md`` is generated from the registry; it must be regenerated after an
  adapter is added or changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxscript_ep_passes import DEFAULT_REGISTRY
from onnxscript_ep_passes.lowering import schemas
from onnxscript_ep_passes.lowering.docs_table import (
    REGENERATE_COMMAND,
    render_adapter_doc,
    render_adapter_table,
)

LOW, HIGH = 18, 28
DOC = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"


def _missing(low: int, high: int) -> list[str]:
    return [
        f"{diff.op_type}-{diff.version} ({diff.kind}: {diff.summary})"
        for diff in sorted(schemas.schema_steps(low, high), key=lambda d: (d.version, d.op_type))
        if DEFAULT_REGISTRY.lookup("", diff.op_type, diff.version) is None
    ]


def _report(missing: list[str]) -> str:
    return f"{len(missing)} schema change(s) have no rule:\n  " + "\n  ".join(missing)


def test_every_schema_change_19_to_28_has_a_rule() -> None:
    missing = _missing(LOW, HIGH)
    if missing:
        pytest.fail(_report(missing), pytrace=False)


@pytest.mark.parametrize("version", range(LOW + 1, HIGH + 1))
def test_every_schema_change_of_one_opset_has_a_rule(version: int) -> None:
    missing = _missing(version - 1, version)
    if missing:
        pytest.fail(_report(missing), pytrace=False)


def test_derived_rules_are_exactly_the_type_only_steps() -> None:
    for diff in schemas.schema_steps(LOW, HIGH):
        entry = DEFAULT_REGISTRY.lookup("", diff.op_type, diff.version)
        if entry is not None and entry.derived:
            assert diff.kind == "type_only", f"{diff.op_type}-{diff.version}: {diff.kind}"
        if diff.kind != "type_only":
            assert entry is None or not entry.derived


def test_every_handwritten_adapter_describes_its_step() -> None:
    undocumented = [
        f"{e.op_type}-{e.version} ({getattr(e.adapter, '__name__', e.adapter)})"
        for e in DEFAULT_REGISTRY.handwritten()
        if not e.description
    ]
    assert not undocumented, f"adapters without a docstring: {undocumented}"


def test_table_has_one_row_per_rule() -> None:
    table = render_adapter_table(LOW, HIGH)
    rows = table.strip().splitlines()
    assert rows[0] == "| op | step | kind | what it does |"
    entries = list(DEFAULT_REGISTRY.entries(LOW, HIGH))
    assert len(rows) == 2 + len(entries)
    for row, entry in zip(rows[2:], entries):
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert cells[:3] == [entry.op_type, f"{entry.version} -> {entry.version - 1}", entry.kind]
    assert "| Reshape | 24 -> 23 | type rule | types added: T +tensor(float8e8m0) |" in rows
    assert any(row.startswith("| Swish | 24 -> 23 | expansion | Swish-24 is new") for row in rows)


def test_docs_adapters_md_is_up_to_date() -> None:
    expected = render_adapter_doc(LOW, HIGH)
    current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    first_difference = next(
        (
            f"line {i + 1}: file has {a!r}, registry gives {b!r}"
            for i, (a, b) in enumerate(zip(current.splitlines(), expected.splitlines()))
            if a != b
        ),
        f"file has {len(current.splitlines())} lines, registry gives {len(expected.splitlines())}",
    )
    if current != expected:
        pytest.fail(
            "docs/adapters.md is out of date with the adapter registry "
            f"({first_difference}); regenerate it from the repository root with: "
            f"{REGENERATE_COMMAND}",
            pytrace=False,
        )
