#!/usr/bin/env bash
# dpinfer set-up: Debian packages + a project-local venv holding LibTorch (the PyPI torch wheel).
#
# Idempotent and quick on a machine that already has everything: each step checks
# before it installs. Runs as root (or with sudo available) on Debian 12.
#
#   tools/setup.sh            install what is missing
#   DPINFER_SKIP_TORCH=1 ...  skip the venv (the launcher and its tests need no LibTorch; without
#                             the venv's pyarrow, dpinfer is built without parquet support)
#   DPINFER_SKIP_READERS=1 .. skip the interop tests' Python readers (the quickstart runs no test)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DPINFER_VENV:-$root/.venv}"
torch_version="2.11.0"
# torch's wheel is installed with --no-deps: its CUDA libraries come from the system toolkit.
# These three are not part of the CUDA 13.0 toolkit, but libtorch_cuda.so needs them
# (libcusparseLt.so.0, libcufile.so.0, and libnvshmem_host.so.3 through libtorch_nvshmem.so:
# without them linking fails and `import torch` breaks); pins follow torch 2.11.0+cu130's
# own requirements.
nvidia_extras=(nvidia-cusparselt-cu13==0.8.0 nvidia-cufile==1.15.1.6 nvidia-nvshmem-cu13==3.4.5)
# torch's pure-Python dependencies, so that `import torch.utils` (CMake asks it for
# cmake_prefix_path) works in the venv.
py_deps=(filelock typing-extensions "setuptools<82" sympy networkx jinja2 fsspec)

# clang and its runtime libraries (libFuzzer, ASan, UBSan) build the fuzz tests of tests/fuzz.
# libssl-dev: libcrypto's SHA-256 (the infotext's Model hash and Lora hashes).
# libwebp-dev: --image-format webp (libwebp and libwebpmux), and WebP input images.
# libjpeg-dev: JPEG input images (img2img items), decoded by libjpeg-turbo as Pillow decodes them.
# libsentencepiece-dev: the T5 tokenizer (SentencePiece Unigram, spiece.model) of FLUX.1, Chroma and SD3.
debs=(g++ cmake ninja-build ccache pkg-config libcli11-dev libspdlog-dev libfmt-dev
      nlohmann-json3-dev libstb-dev libgtest-dev libgmock-dev libpng-dev python3-venv python3-pip procps iproute2
      clang libclang-rt-14-dev libsentencepiece-dev libssl-dev libwebp-dev libjpeg-dev)

say() { printf 'setup: %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "${DPINFER_SKIP_TORCH:-0}" != 1 ]; then
  py=/usr/bin/python3
  [ -x "$py" ] || py="$(command -v python3)"
  if [ ! -x "$venv/bin/python" ]; then
    say "creating venv $venv"
    "$py" -m venv "$venv"
  fi
  have="$("$venv/bin/python" - <<'PY' 2>/dev/null || true
import importlib.metadata as m
try: print(m.version("torch"))
except Exception: print("")
PY
)"
  if [ "${have%%+*}" != "$torch_version" ]; then
    say "installing torch==$torch_version into $venv (LibTorch; large download, cached by pip)"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
      "torch==$torch_version" "${nvidia_extras[@]}"
  fi
  if ! "$venv/bin/python" -c "import torch.utils" 2>/dev/null; then
    say "installing torch's Python dependencies into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${py_deps[@]}"
  fi
  if ! err="$("$venv/bin/python" -c "import torch" 2>&1)"; then
    # Without the system CUDA 13 toolkit the wheel's CUDA libraries are missing: take
    # them from PyPI instead (torch's own nvidia-* dependencies, a few GB).
    say "torch does not load ($(printf '%s' "$err" | tail -n 1)); installing its CUDA libraries from PyPI"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==$torch_version"
    err="$("$venv/bin/python" -c "import torch" 2>&1)" ||
      { say "ERROR: torch still does not load: $(printf '%s' "$err" | tail -n 1)"; exit 1; }
  fi
  # pyarrow (pinned in tools/readers-requirements.txt): its wheel holds the Arrow and Parquet C++
  # headers and libraries that the parquet module builds on (cmake/Arrow.cmake), so it is
  # installed before any configure, the quickstart's too (DPINFER_SKIP_READERS).
  pyarrow_pin="$(grep -E '^pyarrow==' "$root/tools/readers-requirements.txt")"
  if [ "$("$venv/bin/python" -c 'import pyarrow; print("pyarrow==" + pyarrow.__version__)' 2>/dev/null)" != "$pyarrow_pin" ]; then
    say "installing $pyarrow_pin into $venv (Arrow and Parquet C++ for the parquet module)"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$pyarrow_pin"
  fi
  # The Python readers of the interop tests (tools/readers-requirements.txt): a user's
  # datasets and Pillow must load what dpinfer writes, in CI too.
  if [ "${DPINFER_SKIP_READERS:-0}" != 1 ] && ! "$venv/bin/python" -c "import datasets, PIL, webdataset" 2>/dev/null; then
    say "installing the interop tests' Python readers into $venv (datasets, Pillow, webdataset)"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/tools/readers-requirements.txt" 2>&1 |
      grep -v "^torch .* requires \|dependency resolver does not currently" >&2 || true
    "$venv/bin/python" -c "import datasets, PIL, webdataset" ||
      { say "ERROR: the readers do not import after installing tools/readers-requirements.txt"; exit 1; }
  fi
fi
say "ready"
