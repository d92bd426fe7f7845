"""The package's shape: no import cycles between its modules, no module over 500 lines.

Imports are read from the source (module level, inside functions and inside
``if TYPE_CHECKING:`` blocks alike), so a cycle hidden behind a lazy import or a type-only
import counts.
An import names the module it reads from: ``from pkg import sub`` depends on ``pkg.sub``
when that is a module, else on ``pkg``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import onnxscript_ep_passes

_ROOT = Path(onnxscript_ep_passes.__file__).resolve().parent
_PACKAGE = "onnxscript_ep_passes"
_MAX_LINES = 500


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(_ROOT.rglob("*.py")):
        parts = list(path.relative_to(_ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in modules and m != name}


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def walk(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                walk(dep)
        stack.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_sees_lazy_imports() -> None:
    """The analysis is not vacuous: a function-level import is an edge."""
    modules = _modules()
    path = modules[f"{_PACKAGE}.cli.program"]
    inside_functions = {
        node.module
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(_PACKAGE)
    }
    assert inside_functions, "cli imports package modules inside its functions"
    assert inside_functions <= _imports(f"{_PACKAGE}.cli.program", path, modules)


def test_no_module_over_500_lines() -> None:
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > _MAX_LINES
    }
    assert not long, f"modules over {_MAX_LINES} lines: {long}"


def test_the_adapter_registry_is_complete_on_import() -> None:
    """A fresh interpreter that imports only the registry sees every hand-written adapter."""
    import subprocess
    import sys

    code = (
        "from onnxscript_ep_passes.lowering.registry import DEFAULT_REGISTRY as r\n"
        "print(len(list(r.handwritten())), r.lookup('', 'Swish', 24) is not None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert int(out[0]) > 20 and out[1] == "True", out


def test_the_root_holds_at_most_six_modules() -> None:
    """The package's folders show its jobs: the root keeps a few modules, the rest live in
    packages (command line, core, model files, reports, EP knowledge, lowering, fusion)."""
    root = sorted(
        p.name for p in _ROOT.glob("*.py") if p.name not in {"__init__.py", "__main__.py"}
    )
    assert len(root) <= 6, root


# -- provenance is a value ----------------------------------------------------------------

_TEXT_TESTS = {"startswith", "endswith", "partition", "rpartition", "split", "find", "index"}
_TEXT_TESTS |= {"removeprefix", "removesuffix", "count"}


def _is_table_source(node: ast.AST) -> bool:
    """``table.source``, ``<x>.table.source``, ``<x>.table_source``, ``table_source`` or
    ``report["table_source"]``: the text a kernel table's provenance is shown as."""
    if isinstance(node, ast.Attribute):
        if node.attr == "table_source":
            return True
        owner = node.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        return node.attr == "source" and "table" in name
    if isinstance(node, ast.Name):
        return node.id == "table_source"
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == "table_source"
    )


def _is_kind_prefix(node: ast.AST) -> bool:
    """A string constant that starts with a table kind's source prefix (``"live:"``,
    ``"none: measured"``, ...), or the measured-only sentinel by name."""
    from onnxscript_ep_passes.ep.kernel_table import TableKind

    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and any(node.value.startswith(f"{kind.value}:") for kind in TableKind)
    ) or (isinstance(node, ast.Name) and node.id == "MEASURED_ONLY")


def _text_reads_of_provenance(source: str) -> list[int]:
    """Lines where a table's source text is tested (compared, searched, split) or a kind's
    prefix or the measured-only sentinel is compared against."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_table_source(o) or _is_kind_prefix(o) for o in operands):
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _TEXT_TESTS
            and (_is_table_source(node.func.value) or any(map(_is_kind_prefix, node.args)))
        ):
            lines.append(node.lineno)
    return lines


def test_no_module_reads_a_tables_provenance_from_its_text() -> None:
    """A kernel table's provenance is its ``kind`` (a ``TableKind``), carried into every
    result and report; no module tests the ``source`` text for it."""
    found = [
        f"{name}:{line}"
        for name, path in _modules().items()
        for line in _text_reads_of_provenance(path.read_text(encoding="utf-8"))
    ]
    assert not found, "provenance read from text at:\n" + "\n".join(found)


def test_the_provenance_scan_sees_text_reads() -> None:
    """The scan is not vacuous: each way of reading provenance from text is seen."""
    reads = [
        'if table.source.startswith("live:"): pass',
        'live = choice.table_source.partition(":")[0] == "live"',
        "measured = self.table.source == MEASURED_ONLY",
        'kind = report["table_source"].split(":")[0]',
        'ok = "snapshot:" in text',
        'ok = label.startswith("file:")',
        'empty = source == "none: measured"',
    ]
    assert [_text_reads_of_provenance(code) for code in reads] == [[1]] * len(reads)
    shown = 'line = f"{table.source}"; model = stage.source == path; table_kind.detail(s)'
    assert _text_reads_of_provenance(shown) == []
