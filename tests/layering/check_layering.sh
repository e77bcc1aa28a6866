#!/usr/bin/env bash
# The one-way layout: each part of dpinfer may include only the parts below it.
#
#   util <- io <- plan <- launcher <- cli          (no LibTorch: the `dpinfer` binary)
#   util <- io <- pipeline                          (the models; nothing of ranks or processes)
#   util <- io <- plan <- worker                    (one rank; the pipeline only through its seam,
#                                                    pipeline/text_to_image.h and pipeline/load.h)
#
# Checks every #include "dpinfer/..." of include/dpinfer/<part>/ and src/<part>/ against
# this table and prints each one that breaks it. Usage: check_layering.sh SOURCE_DIR
set -euo pipefail
root="${1:?usage: check_layering.sh SOURCE_DIR}"
cd "$root"

declare -A allowed=(
  [util]="util"
  [io]="util io"
  [plan]="util io plan"
  [launcher]="util io plan launcher"
  [cli]="util io plan launcher cli"
  [pipeline]="util io pipeline"
  [worker]="util io plan worker"
)
# The worker's only ways into the pipeline.
worker_seam="dpinfer/pipeline/text_to_image.h dpinfer/pipeline/load.h dpinfer/pipeline/settings.h"

bad=0
checked=0
for part in "${!allowed[@]}"; do
  for dir in "include/dpinfer/$part" "src/$part"; do
    [ -d "$dir" ] || continue
    while IFS= read -r hit; do
      file=${hit%%:*}
      header=$(sed -E 's/.*#include "(dpinfer\/[^"]+)".*/\1/' <<<"${hit#*:}")
      target=$(cut -d/ -f2 <<<"$header")
      checked=$((checked + 1))
      ok=0
      for a in ${allowed[$part]}; do [ "$a" = "$target" ] && ok=1; done
      if [ "$part" = worker ] && [ "$target" = pipeline ]; then
        for seam in $worker_seam; do [ "$seam" = "$header" ] && ok=1; done
      fi
      if [ $ok = 0 ]; then
        echo "$file includes $header: $part may include only ${allowed[$part]}$([ "$part" = worker ] && echo " and $worker_seam")"
        bad=$((bad + 1))
      fi
    done < <(grep -rHE '^#include "dpinfer/' "$dir" --include='*.h' --include='*.cpp' || true)
  done
done
if [ "$checked" -lt 50 ]; then
  echo "only $checked includes checked: is '$root' the source tree?"
  exit 1
fi
if [ "$bad" -gt 0 ]; then
  echo "$bad include(s) break the one-way layout (of $checked checked)"
  exit 1
fi
echo "layering: all $checked includes go one way"
