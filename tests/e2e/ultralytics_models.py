"""Ultralytics' yolo26n and rtdetr-l, built from their YAML configs and exported to ONNX.

The models behind ultralytics PR #25915's published figures (opset 20 on ORT 1.24's CUDA EP:
6 Memcpy on yolo26n with its end-to-end head, 64 on rtdetr-l; none at opset 18), built here
from the YAML configs ultralytics ships (random initialization, no weights: placement
depends on the graph, not on the values), at imgsz 320, batch 1, static shapes.

Run as a script (``python tests/e2e/ultralytics_models.py --out DIR ...``) by
:func:`export_ultralytics_models`, in subprocesses whose ``sys.path`` starts with the folder
tools/setup_ultralytics.sh installs ultralytics into (``.cache/ultralytics``, outside the
project's venv: ultralytics' dependencies stay out of it). Every network connection is
refused (ultralytics checks for updates and fonts); nothing is downloaded.

Two exporters, one per opset range:

- **Opsets 18-20: ultralytics' own exporter**, as the publication used it:
  ``model.export(format="onnx", opset=N, imgsz=320, batch=1, nms=False, dynamic=False)``
  with its defaults otherwise (the TorchScript exporter, ``dynamo=False``, then
  onnxslim). The TorchScript exporter stops at opset 20.
- **Opsets 18-20 as TorchScript exported them** (``simplify=False``: the same export
  without onnxslim), for the placement tests: TorchScript writes no shapes for
  intermediate values and leaves its shape arithmetic (``Shape``, ``Gather``, ``Concat``,
  ``ConstantOfShape``) in the graph, which ORT folds once its own inference makes the
  shapes static; onnxslim has already folded it and spelled every shape.
- **Opsets 21-22: torch's dynamo exporter** (``torch.onnx.export(..., dynamo=True)``, one
  ``torch.export`` trace for both), on the model as ultralytics' exporter prepares it for
  ``format="onnx", nms=False`` (``Exporter.__call__``: the end-to-end branch selected,
  ``eval()``, ``fuse()``, the head's export attributes, ``C2f.forward_split``, a dry run).

Weights: an untrained RT-DETR's decoder layers are deep copies of one initialized layer
(ultralytics' ``_get_clones``), so they are bit-identical and onnxslim merges them (49
Memcpy instead of 64: GridSamples share inputs no trained model shares). Every parameter is
therefore perturbed by a seeded random amount before export, so each layer has its own
weights, as a trained model's do; the graph is the same.

Caching (:func:`cached_ultralytics_models`): each export is made once per test session,
and kept on disk under ``.pytest_cache/ultralytics_exports``, keyed by this file's text and
the versions of torch, ultralytics and onnxslim (``ONNXSCRIPT_EP_PASSES_EXPORT_CACHE=0``
disables the disk cache, as for tests/torch_models.py); a test asks for the exports it
reads, and only those not made yet are exported.

torchvision: ``import ultralytics`` reads ``importlib.metadata.version("torchvision")``, so
the install folder holds torchvision 0.28.0, the release for torch 2.13.0 (what ``pip install
ultralytics`` beside torch 2.13.0 installs). That wheel is the CUDA build, whose C++ ops do
not load beside the CPU torch, so it cannot be imported here; these two models never import
it (ultralytics imports it lazily, for NMS and SAM), and the script checks that it was not.
"""

from __future__ import annotations

__all__ = [
    "DYNAMO_OPSETS",
    "MODELS",
    "OPSETS",
    "ULTRALYTICS_OPSETS",
    "Export",
    "cached_ultralytics_models",
    "export_ultralytics_models",
    "find_ultralytics",
    "main",
]

import argparse
import atexit
import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: where tools/setup_ultralytics.sh installs ultralytics and its dependencies
DEFAULT_TARGET = REPO / ".cache" / "ultralytics"
TARGET_ENV = "ONNXSCRIPT_EP_PASSES_ULTRALYTICS"
MODELS = ("yolo26n", "rtdetr-l")
ULTRALYTICS_OPSETS = (18, 19, 20)  # ultralytics' exporter (TorchScript: at most 20)
DYNAMO_OPSETS = (21, 22)  # torch's dynamo exporter
OPSETS = ULTRALYTICS_OPSETS + DYNAMO_OPSETS
IMGSZ = 320
SEED = 0


@dataclasses.dataclass(frozen=True)
class Export:
    """One exported model file."""

    model: str
    opset: int
    exporter: str  # "ultralytics", "torchscript" (ultralytics', no onnxslim) or "dynamo"
    path: Path
    seconds: float


def find_ultralytics() -> tuple[Path | None, str]:
    """The folder ultralytics is installed in, or None and why it is not there."""
    target = Path(os.environ.get(TARGET_ENV) or DEFAULT_TARGET)
    if not (target / "ultralytics" / "__init__.py").is_file():
        return None, (
            f"ultralytics is not installed in {target} (bash tools/setup_ultralytics.sh "
            f"installs it; {TARGET_ENV} names another folder)"
        )
    return target, ""


def _jobs(
    models: Sequence[str], opsets: Sequence[int], simplify: bool = True
) -> list[tuple[str, str, list[int]]]:
    """One subprocess per ultralytics export (each builds its model: seconds), one per
    model for the dynamo exports (they share one trace) and for the TorchScript exports
    without onnxslim (seconds each); the slowest (rtdetr-l) first."""
    jobs = []
    for name in sorted(models, key=lambda n: not n.startswith("rtdetr")):
        if not simplify:
            jobs.append((name, "torchscript", [o for o in opsets if o in ULTRALYTICS_OPSETS]))
            continue
        jobs += [(name, "ultralytics", [o]) for o in opsets if o in ULTRALYTICS_OPSETS]
        dynamo = [o for o in opsets if o in DYNAMO_OPSETS]
        if dynamo:
            jobs.append((name, "dynamo", dynamo))
    return jobs


def export_ultralytics_models(
    out: Path,
    target: Path,
    models: Sequence[str] = MODELS,
    opsets: Sequence[int] = OPSETS,
    timeout: float = 900.0,
    *,
    simplify: bool = True,
) -> dict[tuple[str, int], Export]:
    """Export ``models`` at ``opsets`` into ``out`` (:func:`_jobs`; ``simplify=False``: the
    TorchScript exports without onnxslim, opsets 18-20 only), as many subprocesses at
    once as there are CPUs (at least two); the exports by (name, opset)."""
    if not simplify and any(o not in ULTRALYTICS_OPSETS for o in opsets):
        raise ValueError(f"TorchScript exports reach opsets {ULTRALYTICS_OPSETS} only")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(target), str(REPO / "src")])
    env["YOLO_OFFLINE"] = "1"  # ultralytics' own switch: no update checks
    env["YOLO_AUTOINSTALL"] = "False"  # never pip install a missing requirement
    env["YOLO_VERBOSE"] = "False"
    out.mkdir(parents=True, exist_ok=True)
    jobs = _jobs(models, opsets, simplify)

    def run(job: tuple[str, str, list[int]]) -> list[Export]:
        name, exporter, job_opsets = job
        tag = f"{name}-{exporter}-{'-'.join(map(str, job_opsets))}"
        args = [sys.executable, str(Path(__file__).resolve()), "--out", str(out)]
        args += ["--model", name, "--exporter", exporter, "--opsets", *map(str, job_opsets)]
        # ultralytics' settings file, one per process (not ~/.config, not shared)
        job_env = {**env, "YOLO_CONFIG_DIR": str(out / "config" / tag)}
        proc = subprocess.run(args, env=job_env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(
                f"exporting {name} ({exporter}) failed (exit {proc.returncode}):\n"
                f"{proc.stderr[-4000:]}"
            )
        manifest = json.loads((out / f"{tag}.json").read_text())
        return [
            Export(name, e["opset"], exporter, out / e["file"], e["seconds"])
            for e in manifest["exports"]
        ]

    workers = max(2, min(len(jobs), os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        done = [e for result in pool.map(run, jobs) for e in result]
    return {(e.model, e.opset): e for e in done}


def _cache_dir(target: Path) -> Path | None:
    """The disk cache of the exports (module docstring), or None when disabled."""
    if os.environ.get("ONNXSCRIPT_EP_PASSES_EXPORT_CACHE") == "0":
        return None
    import torch

    digest = hashlib.sha256(Path(__file__).read_bytes())
    for package in ("ultralytics", "onnxslim"):
        # the installed versions: pip's metadata folders in the install folder
        digest.update(" ".join(sorted(p.name for p in target.glob(f"{package}-*"))).encode())
    digest.update(torch.__version__.encode())
    return REPO / ".pytest_cache" / "ultralytics_exports" / digest.hexdigest()[:16]


@functools.cache
def _cached(target: Path, name: str, opset: int, simplify: bool) -> Export | None:
    """The export on disk, if an earlier session made it (None otherwise)."""
    folder = _cache_dir(target)
    manifest = None if folder is None else folder / _file(name, opset, simplify, ".json")
    if manifest is None or not manifest.is_file():
        return None
    entry = json.loads(manifest.read_text())
    path = manifest.with_name(entry["file"])
    return (
        Export(name, opset, entry["exporter"], path, entry["seconds"]) if path.is_file() else None
    )


@functools.cache
def _session_folder() -> Path:
    """Where the exports go when the disk cache is disabled: removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="ultralytics_exports_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _file(name: str, opset: int, simplify: bool, suffix: str = ".onnx") -> str:
    return f"{name}-{'opset' if simplify else 'torchscript'}{opset}{suffix}"


def cached_ultralytics_models(
    target: Path,
    models: Sequence[str] = MODELS,
    opsets: Sequence[int] = OPSETS,
    *,
    simplify: bool = True,
) -> dict[tuple[str, int], Export]:
    """:func:`export_ultralytics_models`, each export made once (module docstring:
    caching); the exports by (name, opset)."""
    found = {(n, o): _cached(target, n, o, simplify) for n in models for o in opsets}
    missing = [key for key, export in found.items() if export is None]
    if missing:
        folder = _cache_dir(target) or _session_folder()
        names = sorted({n for n, _ in missing})
        todo = sorted({o for _, o in missing})
        made = export_ultralytics_models(folder, target, names, todo, simplify=simplify)
        for (name, opset), export in made.items():
            record = {
                "file": export.path.name,
                "exporter": export.exporter,
                "seconds": export.seconds,
            }
            manifest = folder / _file(name, opset, simplify, ".json")
            manifest.write_text(json.dumps(record))
        _cached.cache_clear()
        found.update({key: made[key] for key in missing})
    return {key: export for key, export in found.items() if export is not None}


def _block_network() -> None:
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network access refused while exporting the ultralytics models")

    socket.socket.connect = refuse  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign,assignment]
    socket.create_connection = refuse  # type: ignore[assignment]
    socket.getaddrinfo = refuse  # type: ignore[assignment]


def _built(name: str):  # type: ignore[no-untyped-def]
    """The ultralytics model object for ``name``'s YAML, each parameter its own (module
    docstring: weights)."""
    import torch
    from ultralytics import RTDETR, YOLO

    torch.manual_seed(SEED)
    wrapper = (RTDETR if name.startswith("rtdetr") else YOLO)(f"{name}.yaml")
    with torch.no_grad():
        for p in wrapper.model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)
    return wrapper


def _prepared(wrapper):  # type: ignore[no-untyped-def]
    """The model as ultralytics' exporter prepares it for format='onnx', nms=False."""
    import copy

    import torch
    from ultralytics.nn.modules import C2f, Detect, RTDETRDecoder

    model = copy.deepcopy(wrapper.model)
    if hasattr(model, "end2end"):
        model.end2end = True  # nms=False: the NMS-free branch where the head has one
    for p in model.parameters():
        p.requires_grad = False
    model.eval()
    model.float()
    model = model.fuse(verbose=False, imgsz=IMGSZ)
    strides = [int(s) for s in model.stride.tolist()]
    for m in model.modules():
        if isinstance(m, (Detect, RTDETRDecoder)):
            m.dynamic = False
            m.export = True
            m.format = "onnx"
            available = (
                m.num_queries
                if isinstance(m, RTDETRDecoder)
                else sum((IMGSZ // s) * (IMGSZ // s) for s in strides)
            )
            m.max_det = min(300, available)
            m.agnostic_nms = False
            m.xyxy = False
            m.shape = None
        elif isinstance(m, C2f):
            m.forward = m.forward_split
    image = torch.zeros(1, 3, IMGSZ, IMGSZ)
    with torch.no_grad():
        model(image)  # the dry run: anchors and strides for this size
    return model, image


def _export_ultralytics(wrapper, name: str, opset: int, out: Path, simplify: bool) -> str:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory(dir=out) as work:
        cwd = os.getcwd()
        os.chdir(work)  # the exporter writes <name>.onnx into the working directory
        try:
            written = wrapper.export(
                format="onnx",
                opset=opset,
                imgsz=IMGSZ,
                batch=1,
                nms=False,
                dynamic=False,
                device="cpu",
                simplify=simplify,
            )
        finally:
            os.chdir(cwd)
        file = _file(name, opset, simplify)
        shutil.move(os.path.join(work, written), out / file)
    return file


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument(
        "--exporter", required=True, choices=("ultralytics", "torchscript", "dynamo")
    )
    parser.add_argument("--opsets", nargs="+", type=int, required=True)
    ns = parser.parse_args(argv)
    _block_network()
    import torch

    out: Path = ns.out
    name: str = ns.model
    exports = []
    start = time.perf_counter()
    wrapper = _built(name)
    if ns.exporter in ("ultralytics", "torchscript"):
        simplify = ns.exporter == "ultralytics"
        for opset in ns.opsets:
            file = _export_ultralytics(wrapper, name, opset, out, simplify)
            exports.append({"opset": opset, "file": file})
    else:
        model, image = _prepared(wrapper)
        with torch.no_grad():
            program = torch.export.export(model, (image,), strict=False)
            for opset in ns.opsets:
                file = f"{name}-opset{opset}.onnx"
                torch.onnx.export(
                    program,
                    (image,),
                    str(out / file),
                    opset_version=opset,
                    dynamo=True,
                    input_names=["images"],
                    output_names=["output0"],
                    external_data=False,
                    verbose=False,
                )
                exports.append({"opset": opset, "file": file})
    seconds = round(time.perf_counter() - start, 1)
    for e in exports:
        e["seconds"] = seconds
    if "torchvision" in sys.modules:
        raise RuntimeError("torchvision was imported: the export's premise (it is not) is wrong")
    tag = f"{name}-{ns.exporter}-{'-'.join(map(str, ns.opsets))}"
    (out / f"{tag}.json").write_text(json.dumps({"exports": exports}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
