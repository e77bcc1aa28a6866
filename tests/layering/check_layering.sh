#!/usr/bin/env bash
# The one-way layout: each part of dpinfer may include only the parts below it.
#
#   util <- io <- plan <- launcher <- cli          (no LibTorch: the `dpinfer` binary; the plan reads
#                                                    the family rows' facts, pipeline/families/family_spec.h)
#   util <- io <- pipeline                          (the models; nothing of ranks or processes)
#   util <- io <- plan <- worker                    (one rank; the pipeline only through its seam,
#                                                    pipeline/text_to_image.h and pipeline/load.h)
#
# Checks every #include "dpinfer/..." of include/dpinfer/<part>/ and src/<part>/ against
# this table, and the pipeline's rooms against theirs (below), and prints each one that breaks it. Usage: check_layering.sh SOURCE_DIR
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
# The plan's only way in: the family rows' torch-free facts, for the generate options' help.
plan_seam="dpinfer/pipeline/families/family_spec.h"

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
      if [ "$part" = plan ] && [ "$target" = pipeline ] && [ "$header" = "$plan_seam" ]; then ok=1; fi
      if [ $ok = 0 ]; then
        echo "$file includes $header: $part may include only ${allowed[$part]}$([ "$part" = worker ] && echo " and $worker_seam")"
        bad=$((bad + 1))
      fi
    done < <(grep -rHE '^#include "dpinfer/' "$dir" --include='*.h' --include='*.cpp' || true)
  done
done
# Rooms inside the pipeline. The checkpoint key conversions (pipeline/conversion/: single files and the LoRA key
# rules' shared pieces) read names and shapes only, so they include no other room of the pipeline; loading/ reads
# weights through them and never reaches into single_file/, which resolves a file and then loads it through loading/.
declare -A room_forbids=(
  [conversion]="families hub inspect loading models nn schedulers single_file text"
  [loading]="single_file families"
)
for room in "${!room_forbids[@]}"; do
  for dir in "include/dpinfer/pipeline/$room" "src/pipeline/$room"; do
    [ -d "$dir" ] || continue
    while IFS= read -r hit; do
      file=${hit%%:*}
      header=$(sed -E 's/.*#include "(dpinfer\/[^"]+)".*/\1/' <<<"${hit#*:}")
      target=$(cut -d/ -f3 <<<"$header")
      checked=$((checked + 1))
      for f in ${room_forbids[$room]}; do
        if [ "$f" = "$target" ] || [ "$f.h" = "$target" ]; then
          echo "$file includes $header: pipeline/$room may not include pipeline/$f"
          bad=$((bad + 1))
        fi
      done
    done < <(grep -rHE '^#include "dpinfer/pipeline/' "$dir" --include='*.h' --include='*.cpp' || true)
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
