"""Shared by the benchmark scripts: measuring a child process, the environment, and
writing results files.

Rules every results file follows (issue 13, item 7):

* It is written only by its script, through :func:`write_results`: ``results_NAME.md``
  (Markdown for people) and ``results_NAME.json`` (the raw data) side by side, in this
  directory. Nothing in them is edited by hand; rerun the script instead.
* Both carry the date, the commit and whether the tree had uncommitted changes under
  ``src/`` or ``benchmarks/`` when they were made, the machine and the package versions.
"""

from __future__ import annotations

__all__ = [
    "HERE",
    "ROOT",
    "compile_package",
    "environment",
    "fit",
    "gb",
    "git_state",
    "machine",
    "measure",
    "versions",
    "write_results",
]

import compileall
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _read_status(pid: int) -> dict[str, int]:
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values


class _Sampler(threading.Thread):
    def __init__(self, pid: int, period: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.peak: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                values = _read_status(self.pid)
            except (OSError, ValueError):
                return
            for key, value in values.items():
                self.peak[key] = max(self.peak.get(key, 0), value)
            self.stop.wait(self.period)


def _limit_address_space(limit: int | None):
    if not limit:
        return None

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def measure(
    cmd: list[str],
    log_dir: Path,
    tag: str,
    *,
    memory_limit: int | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run ``cmd`` in a fresh process; wall time, peak RSS, peak anonymous memory.

    ``memory_limit`` caps the child's address space (``RLIMIT_AS``), so that a tool that
    would take the whole machine fails with MemoryError instead of meeting the OOM killer.
    ``timeout`` (seconds) kills the child after that long; the result then says
    ``timed_out``. The child's stdout and stderr are kept in ``log_dir``.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    out_path, err_path = log_dir / f"{tag}.out", log_dir / f"{tag}.err"
    os.sync()  # the previous run's writeback must not land inside this one
    load_before = os.getloadavg()[0]
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=err, preexec_fn=_limit_address_space(memory_limit)
        )
        sampler = _Sampler(proc.pid)
        sampler.start()
        killer = threading.Timer(timeout, proc.kill) if timeout else None
        if killer is not None:
            killer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        timed_out = killer is not None and not killer.is_alive()
        if killer is not None:
            killer.cancel()
        sampler.stop.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    result: dict[str, Any] = {
        "cmd": " ".join(cmd),
        "rc": proc.returncode,
        "wall_s": wall,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "max_rss_bytes": usage.ru_maxrss * 1024,  # Linux reports KiB
        "minor_faults": usage.ru_minflt,
        "major_faults": usage.ru_majflt,
        "peak_anon_bytes": sampler.peak.get("RssAnon"),
        "peak_file_bytes": sampler.peak.get("RssFile"),
        "loadavg_1m_before": load_before,
        "timed_out": timed_out,
    }
    for line in out_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            result.update(json.loads(line))
    if proc.returncode != 0:
        lines = [x for x in err_path.read_text(errors="replace").splitlines() if x.strip()]
        result["error"] = lines[-1][:400] if lines else f"exit status {proc.returncode}"
        if timed_out:
            result["error"] = f"killed after {timeout:.0f} s (timeout)"
    return result


def compile_package() -> bool:
    """Compile the package's modules to bytecode (``__pycache__``, git-ignored), as pip
    does for an installed package, so that a timed command does not compile them: an
    editable install run with ``PYTHONDONTWRITEBYTECODE`` (as on the machines these
    scripts run on) would otherwise compile every module in every run, while the
    dependencies it is compared against (onnx, onnx-ir) were compiled when installed.
    True when every module compiled."""
    return bool(compileall.compile_dir(ROOT / "src" / "onnxscript_ep_passes", quiet=1))


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("onnx", "onnx_ir", "onnxscript", "onnxruntime", "numpy", "onnxscript_ep_passes"):
        try:
            module = __import__(name)
            found[name] = getattr(module, "__version__", "?")
        except ImportError:
            found[name] = "missing"
    return found


def machine() -> dict[str, Any]:
    mem = 0
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "mem_bytes": mem, "cpu": cpu, "kernel": platform.release()}


def gb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f} GB"


def fit(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Least squares ``y = a + b x``: (a, b, R^2)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    ss_res = sum((y - intercept - slope * x) ** 2 for x, y in points)
    ss_tot = sum((y - my) ** 2 for y in ys) or 1.0
    return intercept, slope, 1 - ss_res / ss_tot


def git_state() -> dict[str, Any]:
    """The commit, and the files under ``src/`` and ``benchmarks/`` changed since it."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError):
            return "?"
        return done.stdout.rstrip("\n")

    changed = git("status", "--porcelain", "--", "src", "benchmarks").splitlines()
    return {
        "commit": git("rev-parse", "--short=10", "HEAD"),
        "commit_date": git("show", "-s", "--format=%cI", "HEAD"),
        "changed": [line[3:] for line in changed if line.strip()],
    }


def environment() -> dict[str, Any]:
    """Date, commit, machine and versions: what every results file records."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git": git_state(),
        "machine": machine(),
        "versions": versions(),
        "loadavg_1m_5m_15m": list(os.getloadavg()),
    }


def _provenance(script: str, command: str, env: dict[str, Any]) -> str:
    git = env["git"]
    tree = (
        "a clean tree"
        if not git["changed"]
        else f"uncommitted changes in {', '.join(git['changed'][:5])}"
    )
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    m = env["machine"]
    load = ", ".join(f"{x:.1f}" for x in env["loadavg_1m_5m_15m"])
    return (
        f"Generated by `{script}` on {env['date']} at commit {git['commit']} ({tree}), "
        f"with `{command}`. Do not edit: rerun the script.\n\n"
        f"Machine: {m['cpus']} CPUs ({m['cpu']}), {m['mem_bytes'] / 2**30:.0f} GiB, "
        f"Linux {m['kernel']}; load average at the end {load}. Versions: {versions}."
    )


def _repo_relative(text: str) -> str:
    """``text`` with the interpreter's path replaced by ``python`` and this checkout's
    absolute path by paths relative to it (the results must not name the machine they
    ran on; the interpreter may live outside the checkout, e.g. another checkout's venv)."""
    text = text.replace(sys.executable, "python")
    return text.replace(f"{ROOT}{os.sep}", "").replace(str(ROOT), ".")


def write_results(
    name: str,
    script: str,
    command: str,
    markdown: str,
    raw: Any,
    *,
    title: str,
    out_dir: Path = HERE,
    env: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write ``results_NAME.md`` and ``results_NAME.json`` into ``out_dir``.

    ``markdown`` is the body (tables and text the script made); the file starts with the
    title and the provenance line. The JSON holds ``{"environment": ..., "results": raw}``.
    """
    env = env or environment()
    command = _repo_relative(command)
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path = out_dir / f"results_{name}.md"
    json_path = out_dir / f"results_{name}.json"
    text = (
        f"# {title}\n\n{_provenance(script, command, env)}\n\n"
        f"Raw data: [{json_path.name}]({json_path.name}).\n\n{markdown.strip()}\n"
    )
    md_path.write_text(_repo_relative(text), encoding="utf-8")
    payload = {"script": script, "command": command, "environment": env, "results": raw}
    dumped = json.dumps(payload, indent=1, default=str)
    # JSON escapes no '/', so the checkout's path appears verbatim in the dump.
    json_path.write_text(_repo_relative(dumped) + "\n", encoding="utf-8")
    return md_path, json_path
