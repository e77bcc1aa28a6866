#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job:
# `dpinfer launch --nproc-per-node 2` over configs/prompts/demo.txt, on the CPU.
#
# dpinfer has no embedded default model yet, so the job runs the tiny
# random-weight pipeline of the parity tests (tests/data/pipelines/tiny-sd1):
# it exercises the whole path (two ranks, CLIP, UNet, scheduler, VAE, PNGs,
# manifest) in seconds, and its images are noise. Pass --model DIR|org/name to use
# a real diffusers model from disk or your Hugging Face cache instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# ccache then hashes paths relative to the checkout, so a fresh clone on the same
# machine (CI) reuses the objects of earlier builds.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
tools/setup.sh
cmake --preset default
cmake --build --preset default
model=(--model tests/data/pipelines/tiny-sd1)
for a in "$@"; do [ "$a" = --model ] && model=(); done
set -x
build/default/tools/dpinfer launch --nproc-per-node 2 configs/prompts/demo.txt \
  --out outputs/demo --steps 8 "${model[@]}" "$@"
