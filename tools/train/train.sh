#!/usr/bin/env bash
# Retrains an embedded model from scratch: the pinned diffusers venv of the fixtures
# (tools/fixtures/setup_venv.sh), then the training script, then the parity goldens
# that the tests compare dpinfer with.
#   train.sh [ARGS]        models/dpinfer-shapes-64, the default model (SD 1.x layout;
#                          train_default_model.py, about 50 minutes on 2 CPU cores;
#                          goldens tests/data/pipelines/dpinfer-shapes-64.golden)
#   train.sh --dit [ARGS]  models/dpinfer-shapes-dit-64, the flow-matching DiT (Z-Image
#                          layout; train_dit_model.py, about 35 minutes on 2 idle cores;
#                          goldens tests/data/pipelines/dpinfer-shapes-dit-64.golden)
# ARGS go to the training script, e.g. --quick (a few steps, to test the script) or
# --out DIR (leave the shipped model alone).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$("$here/../fixtures/setup_venv.sh")"
script=train_default_model.py
golden_args=()
if [ "${1:-}" = --dit ]; then
  shift
  script=train_dit_model.py
  golden_args=(--dit)
fi
"$venv/bin/python" "$here/$script" "$@"
# The goldens describe the shipped model; a run elsewhere (--out, --quick) leaves them.
for a in "$@"; do case "$a" in --out | --out=* | --quick) exit 0 ;; esac; done
"$venv/bin/python" "$here/record_goldens.py" "${golden_args[@]}"
