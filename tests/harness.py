"""Shared test helpers: build one-op models, lower them, prove the result by running it.

Every adapter test goes through :func:`assert_lowers_exactly` (lower, check with
``onnx.checker`` full_check at the target opset, run original and lowered on the same
inputs, compare) or :func:`assert_refuses` (DowngradeError naming the node, model left
byte-identical).
"""

from __future__ import annotations

__all__ = [
    "AdapterCase",
    "assert_lowers_exactly",
    "assert_refuses",
    "benchmark_decoder",
    "check_refusals",
    "checkout_like",
    "fenced_blocks",
    "make_model",
    "random_feeds",
    "reshape_chain",
    "run_cli",
    "run_model",
    "tensor_info",
]

import dataclasses
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import onnx.reference
import onnxruntime as ort

from onnxscript_ep_passes import DowngradeError, lower_opset
from onnxscript_ep_passes.lowering.lower_opset import max_ir_version_for_opset
from onnxscript_ep_passes.lowering.registry import AdapterRegistry

Feeds = dict[str, np.ndarray]
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def benchmark_decoder(
    path: Path, nodes: int = 200, weight_bytes: int = 200_000, **shape: int
) -> onnx.ModelProto:
    """``benchmarks/make_decoder.py``'s decoder of about ``nodes`` nodes (opset 24: an
    Attention, RotaryEmbedding and RMSNormalization per block), written to ``path``;
    ``shape``: its ``hidden``, ``heads``, ``vocab`` and ``seed``."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import make_decoder
    finally:
        sys.path.remove(str(BENCHMARKS))
    make_decoder.build(path, nodes, weight_bytes, **shape)
    return onnx.load(path)


@dataclasses.dataclass
class AdapterCase:
    """One test of one registry entry: a model at ``version`` lowered to ``target``.

    ``refuse`` is a regular expression the DowngradeError message must match; when it
    is None the case must lower exactly.
    """

    op_type: str
    version: int
    name: str
    build: Callable[[], onnx.ModelProto]
    feeds: Callable[[np.random.Generator], Feeds] | None = None
    target: int | None = None
    refuse: str | None = None
    rtol: float = 1e-6
    atol: float = 1e-6

    @property
    def id(self) -> str:
        return f"{self.op_type}-{self.version}-{self.name}"

    def run(self) -> None:
        model = self.build()
        target = self.target if self.target is not None else self.version - 1
        if self.refuse is not None:
            assert_refuses(model, target, self.refuse)
            return
        rng = np.random.default_rng(0)
        feeds = self.feeds(rng) if self.feeds is not None else random_feeds(model, rng)
        assert_lowers_exactly(model, target, feeds, rtol=self.rtol, atol=self.atol)


def tensor_info(name: str, elem: int, shape: list[int | str] | int) -> onnx.ValueInfoProto:
    """A tensor value info; an int shape means that rank with named symbolic dimensions."""
    if isinstance(shape, int):
        shape = [f"{name}_{i}" for i in range(shape)]
    return onnx.helper.make_tensor_value_info(name, elem, shape)


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    opset: int,
    *,
    initializers: Sequence[onnx.TensorProto] = (),
    functions: Sequence[onnx.FunctionProto] = (),
    extra_opsets: Mapping[str, int] | None = None,
    name: str = "test_graph",
) -> onnx.ModelProto:
    """A model at ``opset`` with the newest IR version that opset allows."""
    graph = onnx.helper.make_graph(
        list(nodes), name, list(inputs), list(outputs), list(initializers)
    )
    opsets = [onnx.helper.make_opsetid("", opset)]
    opsets += [onnx.helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = onnx.helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    model.ir_version = max_ir_version_for_opset(opset)
    return model


def gelu_in_if(if_name: str, output: str) -> onnx.NodeProto:
    """``output = If(c, then: Neg(Gelu(x)), else: Neg(x))`` over ``x`` float [2, 5]: a
    Gelu-24 in a subgraph, for passes that must reach into subgraphs."""
    out = onnx.helper.make_tensor_value_info
    make_node = onnx.helper.make_node
    float_ = onnx.TensorProto.FLOAT
    then_branch = onnx.helper.make_graph(
        [
            make_node("Gelu", ["x"], ["g"], name="branch_gelu", approximate="tanh"),
            make_node("Neg", ["g"], ["t"], name="then_neg"),
        ],
        "then",
        [],
        [out("t", float_, [2, 5])],
    )
    else_branch = onnx.helper.make_graph(
        [make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [], [out("e", float_, [2, 5])]
    )
    return make_node(
        "If", ["c"], [output], name=if_name, then_branch=then_branch, else_branch=else_branch
    )


def reshape_chain(opset: int = 24, count: int = 1) -> onnx.ModelProto:
    """Relu then ``count`` Reshapes (``reshape0``...), [2, 6] -> [3, 4] float: at opset 24 the
    Reshapes miss CUDA 1.24's "Reshape 23+" kernel, at 23 they match it."""
    nodes = [onnx.helper.make_node("Relu", ["x"], ["r0"], name="relu")]
    nodes += [
        onnx.helper.make_node("Reshape", [f"r{i}", "shape"], [f"r{i + 1}"], name=f"reshape{i}")
        for i in range(count)
    ]
    return make_model(
        nodes,
        [tensor_info("x", onnx.TensorProto.FLOAT, [2, 6])],
        [tensor_info(f"r{count}", onnx.TensorProto.FLOAT, [3, 4])],
        opset,
        initializers=[onnx.numpy_helper.from_array(np.array([3, 4], np.int64), "shape")],
    )


def random_feeds(model: onnx.ModelProto, rng: np.random.Generator) -> Feeds:
    """Random inputs for every graph input with a fully known tensor type and shape."""
    feeds: Feeds = {}
    initializer_names = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializer_names:
            continue
        tensor_type = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        shape = [d.dim_value if d.HasField("dim_value") else 2 for d in tensor_type.shape.dim]
        if np.issubdtype(dtype, np.bool_):
            feeds[value.name] = rng.random(shape) > 0.5
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(-5, 6, size=shape).astype(dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def run_model(
    model: onnx.ModelProto, feeds: Feeds, *, strict: bool = True
) -> tuple[list[np.ndarray], str]:
    """Outputs of ``model`` from ORT's CPU EP, or from onnx.reference when ORT cannot run it.

    With ``strict`` only a missing ORT kernel sends the model to the reference; any other
    ORT failure (an invalid model) is raised. Originals that use features ORT rejects
    (e.g. Cast's ``round_mode`` outside float8e8m0) are run with ``strict=False``.
    """
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as error:
        if strict and "NOT_IMPLEMENTED" not in str(error):
            raise
        reason = str(error).splitlines()[0][:200]
        evaluator = onnx.reference.ReferenceEvaluator(model)
        results = evaluator.run(None, feeds)
        return [np.asarray(r) for r in results], f"onnx.reference ({reason})"
    names = [o.name for o in session.get_outputs()]
    results = session.run(names, feeds)
    return [np.asarray(r) if not isinstance(r, list) else r for r in results], "onnxruntime"


def _assert_same(expected: object, actual: object, rtol: float, atol: float, what: str) -> None:
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), what
        for i, (e, a) in enumerate(zip(expected, actual)):
            _assert_same(e, a, rtol, atol, f"{what}[{i}]")
        return
    e = np.asarray(expected)
    a = np.asarray(actual)
    assert e.shape == a.shape, f"{what}: shape {a.shape} != {e.shape}"
    assert e.dtype == a.dtype, f"{what}: dtype {a.dtype} != {e.dtype}"
    if e.dtype.kind in "biuUSO" or e.dtype == np.bool_:
        np.testing.assert_array_equal(a, e, err_msg=what)
    else:
        np.testing.assert_allclose(
            a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, err_msg=what
        )


def assert_lowers_exactly(
    model: onnx.ModelProto,
    target: int,
    feeds: Feeds,
    *,
    rtol: float = 1e-6,
    atol: float = 1e-6,
) -> onnx.ModelProto:
    """Lower ``model`` to ``target``; check it; compare outputs on ``feeds``.

    When ORT runs the original, it must run every node the lowering built too (the
    primitive form, not an op ORT has no kernel for).
    """
    onnx.checker.check_model(model, full_check=True)
    before = model.SerializeToString()
    lowered = lower_opset(model, target)
    assert model.SerializeToString() == before, "lower_opset changed the caller's proto"
    default = [o.version for o in lowered.opset_import if o.domain in ("", "ai.onnx")]
    assert default == [target], f"default opset is {default}, expected {target}"
    assert lowered.ir_version <= max_ir_version_for_opset(target)
    onnx.checker.check_model(lowered, full_check=True)
    expected, how_expected = run_model(model, feeds, strict=False)
    actual, how_actual = run_model(lowered, feeds)
    if how_expected == "onnxruntime" and how_actual != "onnxruntime":
        # Only a node the user wrote may lack a kernel at the target (a type rule keeps
        # it as it is); a node the lowering built must be one ORT can load.
        missing = re.search(r"node with name '([^']*)'", how_actual)
        assert missing is not None, f"ORT cannot load the lowered model: {how_actual}"
        written = {node.name for node in model.graph.node}
        assert missing.group(1) in written, (
            f"ORT cannot run a node the lowering built: {how_actual}"
        )
    assert len(expected) == len(actual)
    for index, (e, a) in enumerate(zip(expected, actual)):
        _assert_same(e, a, rtol, atol, f"output {index} ({how_expected} vs {how_actual})")
    return lowered


def registry_expanding_celu_28_in_its_type() -> AdapterRegistry:
    """The package's adapters, but Celu-28 expanded through its function body in the node's
    own type (as the package did before computing the half types in float32): on bfloat16
    it builds an Elu-22 no opset below 22 allows, the case of a refusal of a built node."""
    from onnxscript_ep_passes.lowering.registry import DEFAULT_REGISTRY

    registry = DEFAULT_REGISTRY.copy()
    registry.register(
        "Celu", 28, lambda node, ctx: ctx.expand_function(), kind="expansion", replace=True
    )
    return registry


def check_refusals(error: DowngradeError, target: int) -> None:
    """Every refusal is complete: a reason, the target, and a step it could not undo."""
    assert error.refusals, "a DowngradeError with no refusal"
    assert error.target_opset == target
    for refusal in error.refusals:
        assert refusal.reason.strip(), f"{refusal.op_type}: empty reason"
        assert refusal.target_opset == target
        assert target < refusal.step <= refusal.since_version, (
            f"{refusal.op_type}: step {refusal.step} is not between the target {target} "
            f"and the node's version {refusal.since_version}"
        )


def assert_refuses(model: onnx.ModelProto, target: int, match: str) -> DowngradeError:
    """Lowering must raise a DowngradeError matching ``match`` and leave the proto as it was."""
    before = model.SerializeToString()
    try:
        lower_opset(model, target)
    except DowngradeError as error:
        assert model.SerializeToString() == before, "a refused lowering changed the model"
        message = str(error)
        assert re.search(match, message), f"{match!r} not found in:\n{message}"
        check_refusals(error, target)
        return error
    raise AssertionError(f"lowering to {target} did not refuse (expected {match!r})")


def run_cli(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run the command line as users do (a subprocess, ``-q``); ``kwargs`` go to
    ``subprocess.run`` (timeout, preexec_fn, ...)."""
    command = [sys.executable, "-m", "onnxscript_ep_passes", "-q", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


def fenced_blocks(path: Path) -> list[tuple[str, str]]:
    """``(language, code)`` of each fenced block of a Markdown file, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(), flags=re.S | re.M)


def checkout_like(folder: Path) -> Path:
    """``folder`` laid out like the checkout after the README's first command: ``.venv``
    and ``examples`` linked in, ``out/example.onnx`` (and its data file) built."""
    root = Path(__file__).resolve().parents[1]
    (folder / ".venv").symlink_to(Path(sys.prefix))
    (folder / "examples").symlink_to(root / "examples")
    subprocess.run(
        [sys.executable, "examples/make_example_model.py", "out/example.onnx"],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    return folder
