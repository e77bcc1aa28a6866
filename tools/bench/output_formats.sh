#!/usr/bin/env bash
# The image writer's cost per format and layout (issue 27), beside Pillow's, in one run on one
# thread: dpinfer_write_bench encodes one 512x512 image-like picture as dpinfer's writer does and
# writes it COUNT times, as loose files (temporary, fsync, rename) and into tar shards; Pillow (the
# project venv's, what a diffusers script saves with) saves the same picture COUNT times as loose
# files with its defaults (PNG compress_level 6, JPEG quality 95, WebP quality 90 and lossless).
# Prints images/s per core and bytes per image, and dpinfer's rate over Pillow's. Run it on an idle
# machine; it says which one it ran on.
# Usage: tools/bench/output_formats.sh [COUNT] [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
count="${1:-100}"
build="${2:-$root/build/default}"
bench="$build/tools/bench/dpinfer_write_bench"
py="${DPINFER_VENV:-$root/.venv}/bin/python"
[ -x "$bench" ] || cmake --build "$build" --target dpinfer_write_bench
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg), $(df -h "$work" | awk 'NR==2 {print $1}')"
"$bench" --dump-picture "$work/picture.rgb"
"$bench" --count "$count" --dir "$work/dpinfer" > "$work/dpinfer.csv"
"$py" - "$work" "$count" <<'PY'
import csv, os, sys, time
from PIL import Image
work, count = sys.argv[1], int(sys.argv[2])
side = int((os.path.getsize(f'{work}/picture.rgb') // 3) ** 0.5)
im = Image.frombytes('RGB', (side, side), open(f'{work}/picture.rgb', 'rb').read())
peer = {}
for name, ext, kw in (('png', 'png', {}), ('jpeg q95', 'jpg', {'quality': 95}), ('webp q90', 'webp', {'quality': 90}),
                      ('webp lossless', 'webp', {'lossless': True})):
    os.makedirs(f'{work}/pil', exist_ok=True)
    start = time.perf_counter()
    for i in range(count):
        path = f'{work}/pil/{i:09d}.{ext}'
        with open(path, 'wb') as f:  # as durable as dpinfer's loose files: fsync'd
            im.save(f, format='WEBP' if ext == 'webp' else 'JPEG' if ext == 'jpg' else 'PNG', **kw)
            f.flush()
            os.fsync(f.fileno())
    peer[name] = count / (time.perf_counter() - start)
    for n in os.listdir(f'{work}/pil'):
        os.remove(f'{work}/pil/{n}')
print(f'{"format":14} {"layout":7} {"dpinfer img/s":>13} {"bytes/img":>10} {"Pillow img/s":>13} {"dpinfer/Pillow":>15}')
for row in csv.DictReader(open(f'{work}/dpinfer.csv')):
    rate = float(row['images_per_s'])
    print(f'{row["format"]:14} {row["layout"]:7} {rate:13.1f} {int(row["bytes_per_image"]):10d} '
          f'{peer[row["format"]]:13.1f} {rate / peer[row["format"]]:15.2f}')
PY
