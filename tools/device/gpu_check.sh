#!/usr/bin/env bash
# Issue 4's GPU check, in one call on the lent GPU machine (tools/device/README.md):
#   facts      the machine: GPU, driver, compilers, torch, glibc
#   configure  CMake against that machine's own torch (LibTorch) and the carried
#              third-party headers (tools/device/prepare_carry.sh; -DDPINFER_DEPS_DIR)
#   build      dpinfer_torch_tests and dpinfer_bench only
#   tests      every *_CUDA test: the pipeline on CUDA, fp32 against the diffusers goldens
#              and fp16/bf16 against the CPU (tests/torch/test_pipeline_parity_cuda.cpp), the
#              components, the schedulers, the weight loader, the toolchain
#   bench      dpinfer_bench: SD1.5-shaped pipeline, random weights, 512x512, 25 steps,
#              batch 1 and 8, fp16 on cuda:0
#   peer       tools/bench/diffusers_peer.py on the same files and settings, when the
#              carried diffusers wheels are there: the ratios dpinfer/diffusers
# then a short summary, printed last. Runs in the repository root; needs no network.
# Every step runs even when an earlier one failed (unless it depends on it), and none
# starts once GPU_CHECK_BUDGET_S seconds have passed, so the call ends inside `run`'s limit.
#
# Writes under $OUT (else out/gpu-check), at most 7 files, all of which come back:
#   summary.txt  build.log  cuda_tests.log  cuda_tests.json  bench.log  bench.json  peer.json
#
# Environment (all optional):
#   GPU_CHECK_STEPS     steps to run (default: "facts configure build tests bench peer");
#                       a rerun on a still-warm machine can skip what is done, e.g. "build bench peer"
#   GPU_CHECK_BUDGET_S  no step starts after this many seconds; each is cut at it (default 540)
#   GPU_CHECK_JOBS      build jobs (default: nproc)
#   DPINFER_DEPS_DIR    the carried folder (default: third_party_cache/device)
#   GPU_CHECK_BUILD_DIR the build folder (default: build-device, kept while the machine stays warm)
#   GPU_CHECK_BENCH_ARGS replaces the benchmark's size arguments, for a dry run on a machine
#                       without a GPU, e.g. "--device cpu --dtype fp32 --width 64 --height 64
#                       --steps 2 --batch-sizes 1,2 --warmup 0 --repeats 1"
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root" || exit 1
out="${OUT:-$root/out/gpu-check}"
mkdir -p "$out"
deps="${DPINFER_DEPS_DIR:-$root/third_party_cache/device}"
build="${GPU_CHECK_BUILD_DIR:-$root/build-device}"
steps=" ${GPU_CHECK_STEPS:-facts configure build tests bench peer} "
budget="${GPU_CHECK_BUDGET_S:-540}"
jobs="${GPU_CHECK_JOBS:-$(nproc)}"
model="${TMPDIR:-/tmp}/dpinfer-sd15-random"
images="${TMPDIR:-/tmp}/dpinfer-bench-images"
start=$SECONDS
status=()

want() { [[ "$steps" == *" $1 "* ]]; }

# step NAME MAX_SECONDS LOG CMD...: runs CMD, appending to LOG, cut at MAX_SECONDS or at
# what is left of the budget; records the outcome for the summary.
step() {
  local name=$1 max=$2 log=$3
  shift 3
  local left=$((budget - (SECONDS - start)))
  if ((left < 15)); then
    status+=("$name: skipped, the budget of ${budget}s is spent")
    return 1
  fi
  ((max > left)) && max=$left
  local t0=$SECONDS rc
  echo "== $name (at most ${max}s): $*" >>"$log"
  echo "gpu_check: $name (at most ${max}s)"
  # bash -c: CMD may be one of the functions below (exported with their variables).
  timeout -k 10 "$max" bash -c '"$@"' "$name" "$@" >>"$log" 2>&1
  rc=$?
  if ((rc == 0)); then
    status+=("$name: ok in $((SECONDS - t0))s")
  elif ((rc == 124 || rc == 137)); then
    status+=("$name: TIMED OUT after $((SECONDS - t0))s (log: $(basename "$log"))")
  else
    status+=("$name: FAILED with status $rc after $((SECONDS - t0))s (log: $(basename "$log"))")
  fi
  return $rc
}

py="$(command -v python3)"
torch_prefix="$("$py" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"
# The torch wheel's own libraries and the NVIDIA wheels beside it (site-packages/nvidia/*/lib):
# on the library path for the linker, which follows libtorch_cuda.so's dependencies, and for the runs.
libdirs="$("$py" - <<'PY' 2>/dev/null
import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
dirs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
dirs += sorted(d for d in glob.glob(os.path.join(site, "nvidia", "**", "lib"), recursive=True) if os.path.isdir(d))
print(":".join(dirs))
PY
)"
export LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvcc="$(command -v nvcc || true)"
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
export TORCH_CUDA_ARCH_LIST=9.0

facts() {
  echo "date: $(date -u +%FT%TZ)"
  echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); kernel $(uname -r); $(ldd --version 2>&1 | head -n1)"
  echo "cpus: $(nproc); memory: $(free -g 2>/dev/null | awk '/Mem:/{print $2 " GiB"}')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv 2>&1
  echo "c++: $(c++ --version 2>&1 | head -n1)"
  echo "cmake: $(cmake --version 2>&1 | head -n1); ninja: $(ninja --version 2>&1)"
  echo "nvcc: ${nvcc:-none} $("${nvcc:-false}" --version 2>&1 | tail -n2 | head -n1)"
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
"cudnn", torch.backends.cudnn.version(), "gpu", torch.cuda.is_available() and torch.cuda.get_device_name(0))' 2>&1
  echo "torch cmake prefix: ${torch_prefix:-not found}"
  echo "LD_LIBRARY_PATH: $LD_LIBRARY_PATH"
  echo "carried: $(grep -v '^#' "$deps/MANIFEST.txt" 2>/dev/null | tr '\n' ';')"
}

configure() {
  local cuda_args=()
  if [ -n "$nvcc" ]; then
    local tk
    tk="$(dirname "$(dirname "$nvcc")")"
    cuda_args=(-DCMAKE_CUDA_COMPILER="$nvcc" -DCUDA_TOOLKIT_ROOT_DIR="$tk" -DCUDAToolkit_ROOT="$tk")
  fi
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DDPINFER_WITH_TORCH=ON -DCMAKE_PREFIX_PATH="$torch_prefix" -DTorch_DIR="$torch_prefix/Torch" \
    -DDPINFER_DEPS_DIR="$deps" -DCMAKE_CUDA_ARCHITECTURES=90 "${cuda_args[@]}" \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST -DCMAKE_POLICY_VERSION_MINIMUM=3.5
}

bench() {
  local args=(--device cuda:0 --dtype fp16 --width 512 --height 512 --steps 25 --batch-sizes "1,8" --warmup 1 --repeats 3)
  # shellcheck disable=SC2206  # word splitting wanted
  [ -n "${GPU_CHECK_BENCH_ARGS:-}" ] && args=($GPU_CHECK_BENCH_ARGS)
  "$build/tools/bench/dpinfer_bench" "${args[@]}" --model-dir "$model" --images "$images" --json "$out/bench.json"
}

peer() {
  if ! ls "$deps"/wheels/*.whl >/dev/null 2>&1; then
    echo "no wheels in $deps/wheels (tools/device/prepare_carry.sh without --no-wheels carries them)"
    return 3
  fi
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$deps"/wheels/*.whl || return
  PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 "$py" "$root/tools/bench/diffusers_peer.py" \
    --dpinfer-json "$out/bench.json" --images "$images" --out "$out/peer.json"
}

export root out deps build py torch_prefix nvcc model images LD_LIBRARY_PATH
export -f facts configure bench peer

want facts && step facts 60 "$out/build.log" facts
if want configure; then
  [ -n "$torch_prefix" ] || echo "python3 cannot import torch: no LibTorch" >>"$out/build.log"
  step configure 200 "$out/build.log" configure
fi
if want build; then
  step build 420 "$out/build.log" cmake --build "$build" -j "$jobs" --target dpinfer_torch_tests dpinfer_bench
fi
if want tests && [ -x "$build/tests/dpinfer_torch_tests" ]; then
  step tests 240 "$out/cuda_tests.log" "$build/tests/dpinfer_torch_tests" --gtest_filter='*_CUDA*' \
    --gtest_output="json:$out/cuda_tests.json"
elif want tests; then
  status+=("tests: not run, no dpinfer_torch_tests was built")
fi
if want bench && [ -x "$build/tools/bench/dpinfer_bench" ]; then
  step bench 240 "$out/bench.log" bench
elif want bench; then
  status+=("bench: not run, no dpinfer_bench was built")
fi
if want peer && [ -f "$out/bench.json" ]; then
  step peer 240 "$out/bench.log" peer
elif want peer; then
  status+=("peer: not run, no bench.json")
fi

# The summary: printed last, so that the call's output tail holds it; also summary.txt.
{
  echo
  echo "================ gpu_check summary (${SECONDS}s in all; steps:${steps% }) ================"
  sed -n '/^name, driver_version/{n;p;q}' "$out/build.log" 2>/dev/null | sed 's/^/  gpu: /'
  grep -m1 "^python " "$out/build.log" 2>/dev/null | sed 's/^/  /'
  printf '  %s\n' "${status[@]}"
  for log in $(printf '%s\n' "${status[@]}" | sed -n 's/.*(log: \(.*\))$/\1/p' | sort -u); do
    echo "--- last lines of $log"
    tail -n 30 "$out/$log"
  done
  if [ -f "$out/cuda_tests.json" ]; then
    "$py" - "$out/cuda_tests.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
cases = [(s["name"] + "." + t["name"], t.get("failures", []), t.get("time", "")) for s in d.get("testsuites", []) for t in s.get("testsuite", [])]
bad = [c for c in cases if c[1]]
print(f"--- *_CUDA tests: {len(cases) - len(bad)} passed, {len(bad)} failed of {len(cases)}")
for name, failures, t in bad:
    first = " | ".join(line.strip() for line in failures[0]["failure"].splitlines()[1:4])
    print(f"  FAILED {name} ({t}): {len(failures)} failure(s); first: {first[:400]}")
PY
  fi
  if [ -f "$out/cuda_tests.log" ]; then
    echo "--- pipeline on CUDA, image ||d||/||ref||: fp32 vs the diffusers goldens, fp16/bf16 vs the same dtype on the CPU"
    grep "^\[ parity-cuda \]" "$out/cuda_tests.log" | sed 's/^\[ parity-cuda \] /  /'
    echo "--- components on CUDA: worst rel err per dtype (the tests' own bounds)"
    awk '/ cuda .*rel err/ {
           split($0, a, " rel err "); e = a[2] + 0;
           d = ($0 ~ / Float /) ? "fp32" : ($0 ~ / Half /) ? "fp16" : ($0 ~ / BFloat16 /) ? "bf16" : "other";
           c = ($0 ~ /decode|encode/) ? "vae" : ($0 ~ /unet\.out/) ? "unet" : "text";
           k = c " " d; if (e >= w[k]) { w[k] = e; n[k] = a[1]; sub(/^ +/, "", n[k]); sub(/ +$/, "", n[k]) } }
         END { for (k in w) printf "  %-10s %.3e  (%s)\n", k, w[k], n[k] }' "$out/cuda_tests.log" | sort
    grep -h "^\[ schedulers \]" "$out/cuda_tests.log" | sed 's/^/  /'
  fi
  if [ -f "$out/bench.log" ]; then
    echo "--- dpinfer_bench"
    sed -n '/^dpinfer_bench: sd15\|^dpinfer_bench: .*steps, guidance/p; /pipeline loaded/p; /wrote random/p; /^  batch  s\/batch/,/^$/p' \
      "$out/bench.log" | sed 's/^/  /'
    if grep -q "^  ratios" "$out/bench.log"; then
      echo "--- diffusers peer, same machine, same run"
      sed -n '/^machine: /,$p' "$out/bench.log" | grep -v "^diffusers_peer: wrote" | sed 's/^/  /'
    fi
  fi
  echo "files in $out: $(cd "$out" && ls | tr '\n' ' ')"
} 2>&1 | tee "$out/summary.txt"
