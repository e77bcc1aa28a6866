#!/usr/bin/env bash
# Retrains the embedded default model, models/dpinfer-shapes-64, from scratch:
# the pinned diffusers venv of the fixtures (tools/fixtures/setup_venv.sh), then
# train_default_model.py (about 50 minutes on 2 CPU cores), then the parity
# goldens of tests/data/pipelines/dpinfer-shapes-64.golden that the tests compare
# dpinfer with. Arguments go to train_default_model.py, e.g. --quick (a few steps,
# to test the script) or --out DIR (leave the shipped model alone).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$("$here/../fixtures/setup_venv.sh")"
"$venv/bin/python" "$here/train_default_model.py" "$@"
# The goldens describe the shipped model; a run elsewhere (--out, --quick) leaves them.
for a in "$@"; do case "$a" in --out | --out=* | --quick) exit 0 ;; esac; done
"$venv/bin/python" "$here/record_goldens.py"
