#!/usr/bin/env bash
# Set up a development environment from scratch: .venv with the package (editable),
# its test/lint tools, torch (CPU) for real exports, the WebGPU plugin EP and Olive (for
# the Olive pass and its workflow test), and ultralytics beside it (tools/setup_ultralytics.sh).
# As root on Debian 12 it also installs Mesa's lavapipe Vulkan driver, so the WebGPU EP
# runs on the CPU (see tools/setup_webgpu.sh). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch==2.13.0 is pinned: an unpinned torch would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q -e ".[dev,webgpu,torch,olive]"

# ultralytics for the published-figure tests, in .cache/ultralytics (not the venv).
bash tools/setup_ultralytics.sh

if [ -f tools/setup_webgpu.sh ]; then
  bash tools/setup_webgpu.sh || echo "WebGPU driver setup failed: WebGPU tests will be skipped" >&2
fi
echo "environment ready: . .venv/bin/activate"
