#!/usr/bin/env bash
# Install ultralytics (and what it imports) into .cache/ultralytics, outside the project's
# venv, for tests/ultralytics_models.py: the exports behind the published-figure tests
# (tests/ep/test_published_figures.py). The export runs in a subprocess with this folder
# first on sys.path and the venv's torch, so nothing here touches the venv. Idempotent.
#
# Pinned, --no-deps: pip would otherwise pull torch and torchvision with their CUDA
# libraries. torchvision 0.28.0 is the release for torch 2.13.0; ultralytics reads its
# version at import (the wheel is the CUDA build, whose ops do not load beside the CPU
# torch; these models never import it). onnxslim is ultralytics' default ONNX simplifier.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${ONNXSCRIPT_EP_PASSES_ULTRALYTICS:-.cache/ultralytics}
STAMP="$TARGET/.installed-1"
if [ -f "$STAMP" ]; then
  echo "setup_ultralytics: $TARGET ready"
  exit 0
fi
rm -rf "$TARGET"
.venv/bin/python -m pip install -q --no-deps --target "$TARGET" \
  ultralytics==8.4.190 torchvision==0.28.0 onnxslim==0.1.98 colorama==0.4.6 \
  matplotlib==3.11.2 contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0 kiwisolver==1.5.1 \
  pyparsing==3.3.3 python-dateutil==4.0.0 pillow==13.0.0 opencv-python-headless==5.1.0.95 \
  scipy==1.17.1 psutil==7.2.2 polars==2.1.0 polars-runtime-32==2.1.0 ultralytics-thop==2.2.3
touch "$STAMP"
echo "setup_ultralytics: installed into $TARGET"
