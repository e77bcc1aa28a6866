#!/usr/bin/env bash
# Issue 4's GPU check, and issue 10's SDXL at 1024², in one call on the lent GPU machine
# (tools/device/README.md):
#   facts      the machine: GPU, driver, compilers, torch, glibc
#   configure  CMake against that machine's own torch (LibTorch) and the carried
#              third-party headers (tools/device/prepare_carry.sh; -DDPINFER_DEPS_DIR)
#   build      dpinfer_bench, and dpinfer_torch_tests when the tests step is wanted
#   tests      every *_CUDA test: the pipeline on CUDA, fp32 against the diffusers goldens
#              and fp16/bf16 against the CPU (tests/torch/test_pipeline_parity_cuda.cpp; FLUX.2 [klein]'s
#              step: tiny-flux2-klein, tiny-flux2-klein-base and [dev]'s tiny-flux2-dev there), the components, the schedulers,
#              the weight loader, the toolchain (all but GpuLevers', which the next step runs)
#   levers     (issue 28 item 3) GpuLevers' *_CUDA tests (tests/torch/test_gpu_levers.cpp), appended to
#              cuda_tests.log: tiny-flux-dev in bf16 on cuda:0 with --attention-backend auto, flash,
#              efficient, cudnn and math, and tiny-sd1 and tiny-sdxl in fp16 with and without
#              --channels-last, each image against the CPU's in the same dtype (||d||/||ref|| <= 2e-2);
#              and tiny-flux-dev in bf16 with --fp8-compute tensorwise (against the CPU's tensorwise image)
#              and rowwise (against the CPU's bf16 image; <= 1e-1); one "[ gpu-levers ]" line each in the summary
#   bench      dpinfer_bench: SD1.5-shaped pipeline (configs/models/sd15-shape), random
#              weights, 512x512, 25 PNDM steps, CFG 7.5, batch 1 and 8, fp16 on cuda:0
#   peer       tools/bench/diffusers_peer.py on the same files and settings, when the
#              carried diffusers wheels are there: the ratios dpinfer/diffusers
#   sdxl       dpinfer_bench: SDXL base-shaped pipeline (configs/models/sdxl-shape), random
#              weights written in fp16 here, 1024x1024, 20 Euler steps, CFG 5.0, batch 1
#              and 4, fp16 on cuda:0 (the VAE upcast to fp32, as diffusers)
#   sdxl_peer  diffusers_peer.py on the SDXL files and settings
#   qwen       (not in the default list: ask for it, e.g. GPU_CHECK_STEPS="facts configure build
#              qwen qwen_peer") dpinfer_bench: Qwen-Image-shaped pipeline (configs/models/
#              qwen-image-shape: the real 7B text encoder, the real VAE, and the transformer cut to
#              GPU_CHECK_QWEN_LAYERS of its 60 blocks, default 20, so that the random weights, about
#              28 GB in bf16, fit the machine's disk and time), 1024x1024, 20 steps, true CFG 4.0
#              with the negative prompt " ", batch 1, bf16 on cuda:0; the transformer's time per
#              step scales with its blocks (x3 for the real 60)
#   qwen_peer  diffusers_peer.py on the Qwen-Image files and settings (QwenImagePipeline with
#              true_cfg_scale)
#   flux       (not in the default list either) dpinfer_bench: FLUX.1-dev-shaped pipeline
#              (configs/models/flux-dev-shape: the real T5-XXL encoder, CLIP-L, the 16-channel VAE,
#              and the transformer cut to GPU_CHECK_FLUX_LAYERS of its 19 double-stream blocks,
#              default 6, with twice as many of its 38 single-stream ones, so that the random
#              weights, about 17 GB in bf16, fit the machine's time), 1024x1024, 28 steps,
#              distilled guidance 3.5, T5 padded to 512 tokens, batch 1, bf16 on cuda:0; the
#              transformer's time per step scales about x3.1 for the real 19 + 38 blocks
#   flux_peer  diffusers_peer.py on the FLUX.1 files and settings (FluxPipeline)
#   offload    (issue 26 item 4; not in the default list: ask for it, e.g. GPU_CHECK_STEPS="facts
#              configure build tests offload", the tests step running test_offload.cpp's *_CUDA
#              tests: the side-stream copies, events and pinned host copies, and the images of
#              --offload model and blocks against none on cuda:0) dpinfer_bench on the FLUX.1-dev
#              shape cut to GPU_CHECK_OFFLOAD_LAYERS double-stream blocks (default 2) and twice as
#              many single-stream ones, T5 cut to 2 layers, 1024x1024, 4 steps, bf16, batch 1, run
#              with --offload none, model and blocks:1 on the same files: each one's s/image and
#              peak allocated GiB, and for blocks the time its copies take alone (their bytes at
#              the measured pinned host-to-device bandwidth) against the time blocks added to none:
#              overlap = 1 - added / alone (1: the copies hidden behind the compute)
#   invariance (issue 34; after bench, whose random SD1.5-shaped model it uses) 9 items at
#              --batch-size 4, 256x256, 8 steps, in fp16 and in bf16 on cuda:0, made by one
#              process, by two processes at once (--shard 0/2 and 1/2: NCCL takes no two ranks on
#              one GPU), and again with 3 of the PNGs deleted (a resume): every PNG byte-identical
#              (cmp); and the one-process images/s at batch 4 and batch 1 (invariance.log)
# then a short summary, printed last. Runs in the repository root; needs no network.
# Steps run in the order GPU_CHECK_STEPS lists them. Every step runs even when an earlier
# one failed (unless it needs what that one makes), and none starts once GPU_CHECK_BUDGET_S
# seconds have passed (the SDXL ones not with less than their minimum left), so the call
# ends inside `run`'s limit. The device time estimate of each step is in tools/device/README.md.
#
# Writes under $OUT (else out/gpu-check), at most 8 files, all of which come back:
#   summary.txt  build.log  cuda_tests.log  cuda_tests.json  bench.log (SD1.5 bench and
#   peer)  invariance.log  sdxl.log (SDXL bench and peer)  [qwen.log (Qwen-Image bench and peer)]  [flux.log (FLUX.1
#   bench and peer)]  bench.json (every bench and peer report of the call, {"sd15": {"dpinfer": ...,
#   "diffusers": ...}, "sdxl": {...}}). `run` brings back 8 files at most: a call with every step that
#   writes a log and both qwen and flux makes 10, so ask for those two in separate calls.
#
# Environment (all optional):
#   GPU_CHECK_STEPS     steps to run, in this order (default: "facts configure build tests
#                       bench peer sdxl sdxl_peer"); a rerun on a still-warm machine can skip
#                       what is done, e.g. "sdxl sdxl_peer"; a fresh machine needs
#                       "facts configure build" first
#   GPU_CHECK_BUDGET_S  no step starts after this many seconds; each is cut at it (default 540)
#   GPU_CHECK_JOBS      build jobs (default: nproc)
#   DPINFER_DEPS_DIR    the carried folder (default: third_party_cache/device)
#   GPU_CHECK_BUILD_DIR the build folder (default: build-device, kept while the machine stays warm)
#   GPU_CHECK_BENCH_ARGS replaces both benchmarks' size arguments, for a dry run on a machine
#                       without a GPU, e.g. "--device cpu --dtype fp32 --width 64 --height 64
#                       --steps 2 --batch-sizes 1,2 --warmup 0 --repeats 1"
#   GPU_CHECK_QWEN_LAYERS the Qwen-Image transformer's blocks (default 20 of the real 60)
#   GPU_CHECK_QWEN_TE_LAYERS the text encoder's layers (default 28, the real count; fewer only for
#                       a dry run on a machine without the memory)
#   GPU_CHECK_FLUX_LAYERS the FLUX.1 transformer's double-stream blocks (default 6 of the real 19),
#                       and twice that many single-stream ones (of 38)
#   GPU_CHECK_FLUX_T5_LAYERS T5's layers (default 24, the real count; fewer only for a dry run)
#   GPU_CHECK_OFFLOAD_LAYERS the offload step's double-stream blocks (default 2, and twice that
#                       many single-stream ones)
#   GPU_CHECK_OFFLOAD_ARGS replaces the offload step's bench arguments (default: "--device cuda:0
#                       --dtype bf16 --weights-dtype bf16 --width 1024 --height 1024 --steps 4
#                       --guidance-scale 3.5 --batch-sizes 1 --warmup 1 --repeats 2")
#   GPU_CHECK_FLUX_ARGS replaces the FLUX.1 benchmark's arguments (default: GPU_CHECK_BENCH_ARGS
#                       when set, else "--device cuda:0 --dtype bf16 --weights-dtype bf16 --width 1024
#                       --height 1024 --steps 28 --guidance-scale 3.5 --batch-sizes 1 --warmup 1 --repeats 2")
#   GPU_CHECK_QWEN_ARGS replaces the Qwen-Image benchmark's arguments (default: GPU_CHECK_BENCH_ARGS
#                       when set, else "--device cuda:0 --dtype bf16 --weights-dtype bf16 --width 1024
#                       --height 1024 --steps 20 --guidance-scale 4.0 --negative-prompt ' '
#                       --batch-sizes 1 --warmup 1 --repeats 2")
#   GPU_CHECK_SDXL_ARGS replaces the SDXL benchmark's alone (default: GPU_CHECK_BENCH_ARGS when
#                       set, else "--device cuda:0 --dtype fp16 --width 1024 --height 1024
#                       --steps 20 --guidance-scale 5.0 --batch-sizes 1,4 --warmup 1 --repeats 3")
set -uo pipefail
: "${GPU_CHECK_BENCH_ARGS:=}" "${GPU_CHECK_SDXL_ARGS:=}" "${GPU_CHECK_QWEN_ARGS:=}" "${GPU_CHECK_FLUX_ARGS:=}"
: "${GPU_CHECK_FLUX_LAYERS:=6}" "${GPU_CHECK_FLUX_T5_LAYERS:=24}"
: "${GPU_CHECK_QWEN_LAYERS:=20}" "${GPU_CHECK_QWEN_TE_LAYERS:=28}"
: "${GPU_CHECK_OFFLOAD_LAYERS:=2}" "${GPU_CHECK_OFFLOAD_ARGS:=}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root" || exit 1
out="${OUT:-$root/out/gpu-check}"
mkdir -p "$out"
deps="${DPINFER_DEPS_DIR:-$root/third_party_cache/device}"
build="${GPU_CHECK_BUILD_DIR:-$root/build-device}"
steps=" ${GPU_CHECK_STEPS:-facts configure build tests levers bench peer invariance sdxl sdxl_peer} "
budget="${GPU_CHECK_BUDGET_S:-540}"
jobs="${GPU_CHECK_JOBS:-$(nproc)}"
# The random-weight models, the images and each bench's and peer's JSON report stay outside
# $OUT (which comes back, 8 files at most), where a rerun on the still-warm machine finds them;
# the summary merges the reports into $OUT/bench.json.
tmp="${TMPDIR:-/tmp}"
work="$tmp/dpinfer-gpu-check"
mkdir -p "$work"
start=$SECONDS
status=()

want() { [[ "$steps" == *" $1 "* ]]; }

# [NEED=S] step NAME MAX_SECONDS LOG CMD...: runs CMD, appending to LOG, cut at MAX_SECONDS
# or at what is left of the budget; not started with less than NEED seconds left (15 unless
# given); records the outcome for the summary.
step() {
  local name=$1 max=$2 log=$3
  shift 3
  local left=$((budget - (SECONDS - start))) need=${NEED:-15}
  if ((left < need)); then
    status+=("$name: skipped, ${left}s of the budget of ${budget}s left, it needs ${need}s")
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
  # The parquet module on the carried pyarrow's Arrow C++ (prepare_carry.sh), never on the
  # machine's own pyarrow, which is of another version; without it, no parquet.
  local parquet_args=(-DDPINFER_WITH_PARQUET=OFF)
  if [ -f "$deps/arrow.tar.xz" ]; then
    mkdir -p "$tmp/dpinfer-arrow" && tar -xJf "$deps/arrow.tar.xz" -C "$tmp/dpinfer-arrow" &&
      parquet_args=(-DDPINFER_WITH_PARQUET=ON -DDPINFER_ARROW_INCLUDE_DIR="$tmp/dpinfer-arrow/include"
                    -DDPINFER_ARROW_LIBRARY_DIR="$tmp/dpinfer-arrow")
  fi
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DDPINFER_WITH_TORCH=ON -DCMAKE_PREFIX_PATH="$torch_prefix" -DTorch_DIR="$torch_prefix/Torch" \
    -DDPINFER_DEPS_DIR="$deps" -DCMAKE_CUDA_ARCHITECTURES=90 "${cuda_args[@]}" "${parquet_args[@]}" \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST -DCMAKE_POLICY_VERSION_MINIMUM=3.5
}

# bench_shape KEY SHAPE ARGS...: dpinfer_bench on SHAPE's random-weight model in $tmp, its
# report in $work/KEY_dpinfer.json and its images in $work/KEY_images.
bench_shape() {
  local key=$1 shape=$2
  shift 2
  rm -rf "$work/${key}_images"
  "$build/tools/bench/dpinfer_bench" --shape "$root/$shape" "$@" --model-dir "$tmp/dpinfer-$key-random" \
    --images "$work/${key}_images" --json "$work/${key}_dpinfer.json"
}

bench() {
  local args=(--device cuda:0 --dtype fp16 --width 512 --height 512 --steps 25 --batch-sizes "1,8" --warmup 1 --repeats 3)
  # shellcheck disable=SC2206  # word splitting wanted
  [ -n "${GPU_CHECK_BENCH_ARGS:-}" ] && args=($GPU_CHECK_BENCH_ARGS)
  bench_shape sd15 configs/models/sd15-shape "${args[@]}"
}

sdxl() {
  local args=(--device cuda:0 --dtype fp16 --width 1024 --height 1024 --steps 20 --guidance-scale 5.0
              --batch-sizes "1,4" --warmup 1 --repeats 3)
  # shellcheck disable=SC2206  # word splitting wanted
  [ -n "${GPU_CHECK_BENCH_ARGS:-}" ] && args=($GPU_CHECK_BENCH_ARGS)
  # shellcheck disable=SC2206
  [ -n "${GPU_CHECK_SDXL_ARGS:-}" ] && args=($GPU_CHECK_SDXL_ARGS)
  bench_shape sdxl configs/models/sdxl-shape "${args[@]}"
}

# qwen: the Qwen-Image shape with its transformer (and, for a dry run, its text encoder) cut to
# fewer blocks, written to $tmp (links followed), then bench_shape on it.
qwen() {
  local shape="$tmp/qwen-image-shape-L${GPU_CHECK_QWEN_LAYERS}-T${GPU_CHECK_QWEN_TE_LAYERS}"
  rm -rf "$shape" && cp -rL "$root/configs/models/qwen-image-shape" "$shape" || return
  "$py" - "$shape" "$GPU_CHECK_QWEN_LAYERS" "$GPU_CHECK_QWEN_TE_LAYERS" <<'PY' || return
import json, sys
shape, layers, te_layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for rel, key, n in (("transformer/config.json", "num_layers", layers), ("text_encoder/config.json", "num_hidden_layers", te_layers)):
    with open(f"{shape}/{rel}") as f:
        c = json.load(f)
    c[key] = n
    with open(f"{shape}/{rel}", "w") as f:
        json.dump(c, f, indent=1)
print(f"qwen-image shape with {layers} of 60 transformer blocks and {te_layers} of 28 text-encoder layers: {shape}")
PY
  local args=(--device cuda:0 --dtype bf16 --weights-dtype bf16 --width 1024 --height 1024 --steps 20
              --guidance-scale 4.0 --negative-prompt " " --batch-sizes 1 --warmup 1 --repeats 2)
  # shellcheck disable=SC2206  # word splitting wanted
  [ -n "${GPU_CHECK_BENCH_ARGS:-}" ] && args=($GPU_CHECK_BENCH_ARGS --weights-dtype bf16 --negative-prompt " ")
  # shellcheck disable=SC2206
  [ -n "${GPU_CHECK_QWEN_ARGS:-}" ] && args=($GPU_CHECK_QWEN_ARGS)
  # bench_shape takes a shape relative to the repository root; this one is outside it.
  rm -rf "$work/qwen_images"
  "$build/tools/bench/dpinfer_bench" --shape "$shape" "${args[@]}" \
    --model-dir "$tmp/dpinfer-qwen-L${GPU_CHECK_QWEN_LAYERS}-T${GPU_CHECK_QWEN_TE_LAYERS}-random" \
    --images "$work/qwen_images" --json "$work/qwen_dpinfer.json"
}

# flux: the FLUX.1-dev shape with its transformer cut to GPU_CHECK_FLUX_LAYERS double-stream and
# twice as many single-stream blocks, written to $tmp (links followed), then dpinfer_bench on it.
flux() {
  local double=$GPU_CHECK_FLUX_LAYERS single=$((2 * GPU_CHECK_FLUX_LAYERS)) t5=$GPU_CHECK_FLUX_T5_LAYERS
  local key="L${double}-S${single}-T${t5}"
  local shape="$tmp/flux-dev-shape-$key"
  rm -rf "$shape" && cp -rL "$root/configs/models/flux-dev-shape" "$shape" || return
  "$py" - "$shape" "$double" "$single" "$t5" <<'PY' || return
import json, sys
shape, double, single, t5 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for rel, values in (("transformer/config.json", {"num_layers": double, "num_single_layers": single}),
                    ("text_encoder_2/config.json", {"num_layers": t5})):
    with open(f"{shape}/{rel}") as f:
        c = json.load(f)
    c.update(values)
    with open(f"{shape}/{rel}", "w") as f:
        json.dump(c, f, indent=1)
print(f"flux-dev shape with {double} of 19 double-stream, {single} of 38 single-stream blocks and {t5} of 24 T5 layers: {shape}")
PY
  local args=(--device cuda:0 --dtype bf16 --weights-dtype bf16 --width 1024 --height 1024 --steps 28
              --guidance-scale 3.5 --batch-sizes 1 --warmup 1 --repeats 2)
  # shellcheck disable=SC2206  # word splitting wanted
  [ -n "${GPU_CHECK_BENCH_ARGS:-}" ] && args=($GPU_CHECK_BENCH_ARGS --weights-dtype bf16)
  # shellcheck disable=SC2206
  [ -n "${GPU_CHECK_FLUX_ARGS:-}" ] && args=($GPU_CHECK_FLUX_ARGS)
  rm -rf "$work/flux_images"
  "$build/tools/bench/dpinfer_bench" --shape "$shape" "${args[@]}" \
    --model-dir "$tmp/dpinfer-flux-$key-random" \
    --images "$work/flux_images" --json "$work/flux_dpinfer.json"
}

# offload: the FLUX.1-dev shape cut to GPU_CHECK_OFFLOAD_LAYERS + twice as many blocks and 2 T5
# layers, then dpinfer_bench with --offload none, model and blocks:1 on the same random files.
offload() {
  local double=$GPU_CHECK_OFFLOAD_LAYERS single=$((2 * GPU_CHECK_OFFLOAD_LAYERS))
  local key="L${double}-S${single}-T2" shape
  shape="$tmp/flux-dev-shape-$key"
  rm -rf "$shape" && cp -rL "$root/configs/models/flux-dev-shape" "$shape" || return
  "$py" - "$shape" "$double" "$single" <<'PY' || return
import json, sys
shape, double, single = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for rel, values in (("transformer/config.json", {"num_layers": double, "num_single_layers": single}),
                    ("text_encoder_2/config.json", {"num_layers": 2})):
    with open(f"{shape}/{rel}") as f:
        c = json.load(f)
    c.update(values)
    with open(f"{shape}/{rel}", "w") as f:
        json.dump(c, f, indent=1)
PY
  local args=(--device cuda:0 --dtype bf16 --weights-dtype bf16 --width 1024 --height 1024 --steps 4
              --guidance-scale 3.5 --batch-sizes 1 --warmup 1 --repeats 2)
  # shellcheck disable=SC2206  # word splitting wanted
  [ -n "${GPU_CHECK_OFFLOAD_ARGS:-}" ] && args=($GPU_CHECK_OFFLOAD_ARGS)
  local mode
  for mode in none model blocks:1; do
    "$build/tools/bench/dpinfer_bench" --shape "$shape" "${args[@]}" --offload "$mode" \
      --model-dir "$tmp/dpinfer-flux-$key-random" --json "$work/offload_${mode%%:*}.json" || return
  done
}

# invariance: issue 34's promise on the GPU, in fp16 and bf16 (see the list of steps above).
invariance() {
  local model="$tmp/dpinfer-sd15-random" worker="$build/tools/dpinfer-worker" w="$work/invariance" bad=0
  [ -f "$model/model_index.json" ] || { echo "no $model: the bench step writes it"; return 3; }
  rm -rf "$w" && mkdir -p "$w"
  for i in 0 1 2 3 4 5 6 7 8; do echo "a photograph of object number $i on a table, studio light"; done >"$w/p.txt"
  local common=("$w/p.txt" --model "$model" --device cuda:0 --steps 8 --width 256 --height 256)
  for dtype in fp16 bf16; do
    for b in 1 4; do
      "$worker" generate "${common[@]}" --dtype "$dtype" --batch-size "$b" --out "$w/$dtype-b$b" || return
      echo "$dtype batch $b: $("$py" -c 'import json, sys; print("%.2f images/s" % json.load(open(sys.argv[1]))["summary"]["images_per_second"])' "$w/$dtype-b$b/run.json")"
    done
    "$worker" generate "${common[@]}" --dtype "$dtype" --batch-size 4 --shard 0/2 --out "$w/$dtype-shards" &
    local first=$!
    "$worker" generate "${common[@]}" --dtype "$dtype" --batch-size 4 --shard 1/2 --out "$w/$dtype-shards" || bad=1
    wait "$first" || bad=1
    cp -r "$w/$dtype-b4" "$w/$dtype-resumed" && rm -f "$w/$dtype-resumed"/00000{1,4,8}.png
    "$worker" generate "${common[@]}" --dtype "$dtype" --batch-size 4 --out "$w/$dtype-resumed" || bad=1
    for run in shards resumed; do
      for f in "$w/$dtype-b4"/*.png; do
        if ! cmp -s "$f" "$w/$dtype-$run/$(basename "$f")"; then
          echo "$dtype $run: $(basename "$f") differs from the one-process run"
          bad=1
        fi
      done
      echo "$dtype $run: compared $(ls "$w/$dtype-b4"/*.png | wc -l) PNGs with the one-process run"
    done
  done
  return $bad
}

# peer KEY: diffusers_peer.py on what bench_shape KEY wrote. Installs the carried wheels into
# /tmp/site once per machine (a python3 that has diffusers already, as on a dry run, is used
# as it is when there are none).
peer() {
  local key=$1 pypath=""
  if ls "$deps"/wheels/*.whl >/dev/null 2>&1; then
    local have
    have="$(cd "$deps/wheels" && ls ./*.whl | sort | tr '\n' ' ')"
    if [ "$(cat /tmp/site/.dpinfer-wheels 2>/dev/null)" != "$have" ]; then
      "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$deps"/wheels/*.whl || return
      echo "$have" >/tmp/site/.dpinfer-wheels
    fi
    pypath=/tmp/site
  elif ! "$py" -c 'import diffusers' 2>/dev/null; then
    echo "no wheels in $deps/wheels (tools/device/prepare_carry.sh without --no-wheels carries them)"
    return 3
  fi
  PYTHONPATH="$pypath" PYTHONUNBUFFERED=1 "$py" "$root/tools/bench/diffusers_peer.py" \
    --dpinfer-json "$work/${key}_dpinfer.json" --images "$work/${key}_images" --out "$work/${key}_diffusers.json"
}

export root out deps build py torch_prefix nvcc tmp work LD_LIBRARY_PATH GPU_CHECK_BENCH_ARGS GPU_CHECK_SDXL_ARGS \
  GPU_CHECK_QWEN_ARGS GPU_CHECK_QWEN_LAYERS GPU_CHECK_QWEN_TE_LAYERS GPU_CHECK_FLUX_ARGS GPU_CHECK_FLUX_LAYERS \
  GPU_CHECK_FLUX_T5_LAYERS
export -f facts configure bench_shape bench sdxl qwen flux offload peer invariance

# A step that runs again replaces its earlier report (from an earlier call on this machine),
# and a new bench report makes the old peer report stale.
want bench && rm -f "$work/sd15_dpinfer.json"
want sdxl && rm -f "$work/sdxl_dpinfer.json"
{ want bench || want peer; } && rm -f "$work/sd15_diffusers.json"
{ want sdxl || want sdxl_peer; } && rm -f "$work/sdxl_diffusers.json"
want qwen && rm -f "$work/qwen_dpinfer.json"
{ want qwen || want qwen_peer; } && rm -f "$work/qwen_diffusers.json"
want flux && rm -f "$work/flux_dpinfer.json"
{ want flux || want flux_peer; } && rm -f "$work/flux_diffusers.json"
want offload && rm -f "$work"/offload_{none,model,blocks}.json

# run_bench NAME LOG NEED MAX: the bench step NAME (bench, sdxl: the functions above).
run_bench() {
  local name=$1 log=$2 need=$3 max=$4
  if [ -x "$build/tools/bench/dpinfer_bench" ]; then
    NEED=$need step "$name" "$max" "$log" "$name"
  else
    status+=("$name: not run, no dpinfer_bench was built")
  fi
}
# run_peer NAME KEY LOG NEED MAX: the diffusers peer of KEY's bench report.
run_peer() {
  local name=$1 key=$2 log=$3 need=$4 max=$5
  if [ -f "$work/${key}_dpinfer.json" ]; then
    NEED=$need step "$name" "$max" "$log" peer "$key"
  else
    status+=("$name: not run, no ${key}_dpinfer.json (its bench step made none)")
  fi
}

for s in $steps; do
  case "$s" in
    facts) step facts 60 "$out/build.log" facts ;;
    configure)
      [ -n "$torch_prefix" ] || echo "python3 cannot import torch: no LibTorch" >>"$out/build.log"
      step configure 200 "$out/build.log" configure ;;
    build)
      targets=(dpinfer_bench)
      want invariance && targets+=(dpinfer-worker)
      { want tests || want levers; } && targets+=(dpinfer_torch_tests)
      step build 420 "$out/build.log" cmake --build "$build" -j "$jobs" --target "${targets[@]}" ;;
    tests)
      if [ -x "$build/tests/dpinfer_torch_tests" ]; then
        step tests 240 "$out/cuda_tests.log" "$build/tests/dpinfer_torch_tests" --gtest_filter='*_CUDA*:-GpuLevers.*' \
          --gtest_output="json:$out/cuda_tests.json"
      else
        status+=("tests: not run, no dpinfer_torch_tests was built")
      fi ;;
    levers)
      # Into cuda_tests.log, no JSON of its own: `run` brings back 8 files at most.
      if [ -x "$build/tests/dpinfer_torch_tests" ]; then
        step levers 120 "$out/cuda_tests.log" "$build/tests/dpinfer_torch_tests" --gtest_filter='GpuLevers.*_CUDA'
      else
        status+=("levers: not run, no dpinfer_torch_tests was built")
      fi ;;
    bench) run_bench bench "$out/bench.log" 15 240 ;;
    peer) run_peer peer sd15 "$out/bench.log" 15 240 ;;
    invariance) step invariance 180 "$out/invariance.log" invariance ;;
    # SDXL: not started without the time to write its weights, load and time batch 1 at least.
    sdxl) run_bench sdxl "$out/sdxl.log" 90 300 ;;
    sdxl_peer) run_peer sdxl_peer sdxl "$out/sdxl.log" 60 240 ;;
    # Qwen-Image: writing ~28 GB of random weights alone takes minutes.
    qwen) run_bench qwen "$out/qwen.log" 240 420 ;;
    qwen_peer) run_peer qwen_peer qwen "$out/qwen.log" 120 300 ;;
    # FLUX.1: about 17 GB of random weights to write first.
    flux) run_bench flux "$out/flux.log" 240 420 ;;
    flux_peer) run_peer flux_peer flux "$out/flux.log" 120 300 ;;
    # Three benches of one small FLUX.1 shape (about 1.5 GB of random weights to write first).
    offload) run_bench offload "$out/offload.log" 90 300 ;;
    *) status+=("$s: unknown step (known: facts configure build tests levers bench peer invariance sdxl sdxl_peer qwen qwen_peer flux flux_peer offload)") ;;
  esac
done

# Every bench and peer report there is, in one file that comes back.
rm -f "$out/bench.json"
"$py" - "$work" "$out/bench.json" <<'PY' 2>/dev/null
import json, os, sys
work, dest = sys.argv[1], sys.argv[2]
merged = {}
for key in ("sd15", "sdxl", "qwen", "flux"):
    for side in ("dpinfer", "diffusers"):
        p = os.path.join(work, f"{key}_{side}.json")
        if os.path.exists(p):
            with open(p) as f:
                merged.setdefault(key, {})[side] = json.load(f)
if merged:
    with open(dest, "w") as f:
        json.dump(merged, f, indent=1)
PY

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
    if grep -q "^\[ gpu-levers \]" "$out/cuda_tests.log"; then
      echo "--- GPU levers (GpuLevers.*_CUDA): each image vs the CPU's in the same dtype; the tests' verdicts"
      grep "^\[ gpu-levers \]" "$out/cuda_tests.log" | sed 's/^\[ gpu-levers \] /  /'
      grep -E "^\[ +(OK|FAILED) +\] GpuLevers\." "$out/cuda_tests.log" | sed 's/^/  /'
    fi
    echo "--- components on CUDA: worst rel err per dtype (the tests' own bounds)"
    awk '/ cuda .*rel err/ {
           split($0, a, " rel err "); e = a[2] + 0;
           d = ($0 ~ / Float /) ? "fp32" : ($0 ~ / Half /) ? "fp16" : ($0 ~ / BFloat16 /) ? "bf16" : "other";
           c = ($0 ~ /decode|encode/) ? "vae" : ($0 ~ /unet\.out/) ? "unet" : "text";
           k = c " " d; if (e >= w[k]) { w[k] = e; n[k] = a[1]; sub(/^ +/, "", n[k]); sub(/ +$/, "", n[k]) } }
         END { for (k in w) printf "  %-10s %.3e  (%s)\n", k, w[k], n[k] }' "$out/cuda_tests.log" | sort
    grep -h "^\[ schedulers \]" "$out/cuda_tests.log" | sed 's/^/  /'
  fi
  for pair in "bench.log:SD1.5 (configs/models/sd15-shape)" "sdxl.log:SDXL base (configs/models/sdxl-shape)" \
              "qwen.log:Qwen-Image (configs/models/qwen-image-shape, ${GPU_CHECK_QWEN_LAYERS} of 60 blocks)" \
              "flux.log:FLUX.1-dev (configs/models/flux-dev-shape, ${GPU_CHECK_FLUX_LAYERS} of 19 + $((2 * GPU_CHECK_FLUX_LAYERS)) of 38 blocks)"; do
    log="$out/${pair%%:*}"
    [ -f "$log" ] || continue
    echo "--- dpinfer_bench, ${pair#*:}"
    sed -n '/^dpinfer_bench: .*steps, guidance/p; /pipeline loaded/p; /wrote random/p; /reusing the random/p;
            /^  batch  s\/batch/,/^$/p' "$log" | sed 's/^/  /'
    if grep -q "^  ratios" "$log"; then
      echo "--- diffusers peer, ${pair#*:}, same machine, same run"
      sed -n '/^machine: /,$p' "$log" | grep -v "^diffusers_peer: wrote" | sed 's/^/  /'
    fi
  done
  if [ -f "$work/offload_none.json" ]; then
    echo "--- --offload on the FLUX.1-dev shape (${GPU_CHECK_OFFLOAD_LAYERS} + $((2 * GPU_CHECK_OFFLOAD_LAYERS)) blocks), batch 1"
    "$py" - "$work" <<'PY'
import json, os, sys
runs = {}
for mode in ("none", "model", "blocks"):
    p = os.path.join(sys.argv[1], f"offload_{mode}.json")
    if os.path.exists(p):
        runs[mode] = json.load(open(p))["runs"][0]
for mode, r in runs.items():
    line = f"  {mode:6s} {r['seconds_per_image']:7.3f} s/image  peak allocated {r['peak_allocated_gib']:6.2f} GiB"
    if "offload_bytes_per_run" in r:
        line += f"  moved {r['offload_bytes_per_run'] / 1e9:.2f} GB a run"
    print(line)
b, n = runs.get("blocks"), runs.get("none")
if b and n and b.get("offload_copy_seconds_alone"):
    added = b["median_seconds"] - n["median_seconds"]
    alone = b["offload_copy_seconds_alone"]
    print(f"  blocks: copies alone {alone:.3f} s at {b['host_to_device_gb_per_s']:.1f} GB/s, added {added:.3f} s: "
          f"overlap {1 - added / alone:.2f}")
PY
  fi
  echo "files in $out: $(cd "$out" && ls | tr '\n' ' ')"
} 2>&1 | tee "$out/summary.txt"
