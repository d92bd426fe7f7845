#!/usr/bin/env bash
# Install a software Vulkan driver (Mesa lavapipe >= 25, from bookworm-backports) so the
# ONNX Runtime WebGPU plugin EP can run on a machine without a GPU.
#
# Rules:
# - Debian 12 (bookworm) only; run as root (or with passwordless sudo).
# - Idempotent and non-interactive: the backports source is written only if missing,
#   `apt-get update` runs at most once, and nothing is installed when a recent enough
#   lavapipe is already present.
# - Optionally installs the Python packages (onnxruntime-ep-webgpu) into the active
#   interpreter when SETUP_WEBGPU_PIP=1 (default: 0; the project's extras do that).
# - Sessions need ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1 to accept the lavapipe adapter
#   (onnxscript_ep_passes.ep.profiles.webgpu.register_webgpu sets it unless already set); a script
#   cannot set it for its caller.
set -euo pipefail

MIN_MESA_MAJOR=${MIN_MESA_MAJOR:-25}
BACKPORTS_FILE=/etc/apt/sources.list.d/backports.sources

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup_webgpu: must run as root (or with sudo)" >&2; exit 1
  fi
fi

. /etc/os-release
if [ "${VERSION_CODENAME:-}" != "bookworm" ]; then
  echo "setup_webgpu: expected Debian 12 (bookworm), found '${PRETTY_NAME:-unknown}'" >&2
  exit 1
fi

installed_mesa_major() {
  dpkg-query -W -f='${Status} ${Version}\n' mesa-vulkan-drivers 2>/dev/null \
    | awk '$3 == "installed" { split($4, v, "."); print v[1]; exit }'
}

major=$(installed_mesa_major || true)
if [ -n "${major}" ] && [ "${major}" -ge "${MIN_MESA_MAJOR}" ]; then
  echo "setup_webgpu: mesa-vulkan-drivers ${major}.x already installed"
else
  if ! grep -qs '^Suites: bookworm-backports' "${BACKPORTS_FILE}"; then
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
      # Reuse the first stanza of the main source (same mirror / keyring), switching the suite.
      awk 'BEGIN{RS="";ORS="\n"} NR==1' /etc/apt/sources.list.d/debian.sources \
        | sed -e 's/^Suites: .*/Suites: bookworm-backports/' \
        | ${SUDO} tee "${BACKPORTS_FILE}" >/dev/null
    else
      printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' \
        'Suites: bookworm-backports' 'Components: main' \
        'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
        | ${SUDO} tee "${BACKPORTS_FILE}" >/dev/null
    fi
    echo "setup_webgpu: wrote ${BACKPORTS_FILE}"
  fi
  ${SUDO} apt-get update -q
  ${SUDO} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -t bookworm-backports mesa-vulkan-drivers libvulkan1
  major=$(installed_mesa_major || true)
  if [ -z "${major}" ] || [ "${major}" -lt "${MIN_MESA_MAJOR}" ]; then
    echo "setup_webgpu: mesa-vulkan-drivers >= ${MIN_MESA_MAJOR} not installed (got '${major}')" >&2
    exit 1
  fi
fi

if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
  echo "setup_webgpu: lavapipe ICD json not found under /usr/share/vulkan/icd.d" >&2
  exit 1
fi

if [ "${SETUP_WEBGPU_PIP:-0}" = "1" ]; then
  python -m pip install --quiet "onnxruntime-ep-webgpu==0.4.0"
fi

echo "setup_webgpu: done; export ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1 before creating sessions"
