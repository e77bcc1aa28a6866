#!/usr/bin/env bash
# --image-format webp read by Pillow, as users read it (issue 27): lossy and lossless files
# open at their size; lossless pixels equal the PNG run's; the EXIF UserComment holds the
# same AUTOMATIC1111 infotext as the PNG's "parameters" chunk, and the XMP packet's
# dpinfer:record the same record as its "dpinfer" chunk; datasets' imagefolder loads the
# folder. The readers come from the project venv (tools/readers-requirements.txt); the test
# fails where they are missing.
# Usage: webp_pillow_test.sh DPINFER_WORKER SOURCE_DIR (the shipped worker, on its default model)
set -euo pipefail
worker="$1"
root="$2"
. "$(dirname "${BASH_SOURCE[0]}")/readers_python.sh"
readers_python "$root" PIL.Image,datasets
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf '%s\n' '{"prompt": "a red circle", "num_images": 2}' '{"prompt": "caf\u00e9 \u2615", "seed": 7, "width": 48}' \
  > "$work/p.jsonl"
for run in png:--image-format=png lossy:--image-format=webp lossless:--image-format=webp,--webp-lossless \
           q10:--image-format=webp,--webp-quality=10; do
  name="${run%%:*}"
  IFS=, read -r -a args <<< "${run#*:}"
  CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 "$worker" generate "$work/p.jsonl" --out "$work/$name" --steps 4 "${args[@]}" \
    2> "$work/err.log" ||
    { cat "$work/err.log"; exit 1; }
done
"$py" - "$work" <<'PY'
import json, os, sys, xml.etree.ElementTree as ET
import numpy as np
from PIL import Image
work = sys.argv[1]
records = [json.loads(l) for l in open(f'{work}/png/metadata.jsonl')]
assert len(records) == 3
for rec in records:
    png = Image.open(f"{work}/png/{rec['file_name']}")
    stem = rec['file_name'][:-len('.png')]
    sizes = {}
    for kind in ('lossy', 'lossless', 'q10'):
        path = f'{work}/{kind}/{stem}.webp'
        im = Image.open(path)
        assert im.format == 'WEBP' and im.size == png.size, (path, im.format, im.size, png.size)
        pixels = np.asarray(im.convert('RGB'), dtype=np.int16)
        ref = np.asarray(png.convert('RGB'), dtype=np.int16)
        if kind == 'lossless':
            assert (pixels == ref).all(), f'{path}: lossless pixels differ from the PNG'
        else:
            assert np.abs(pixels - ref).mean() < (40 if kind == 'q10' else 12), (path, np.abs(pixels - ref).mean())
        # A1111's infotext: Exif IFD's UserComment, "UNICODE\0" + UTF-16BE.
        comment = im.getexif().get_ifd(0x8769)[0x9286]
        assert comment[:8] == b'UNICODE\0', comment[:8]
        assert comment[8:].decode('utf-16-be') == png.info['parameters'], path
        # dpinfer's record: the XMP packet's dpinfer:record.
        root = ET.fromstring(im.info['xmp'].decode('utf-8').split('?>', 1)[1].rsplit('<?xpacket', 1)[0])
        record = root.find('.//{https://dpinfer.dev/ns/1.0/}record').text
        ours, png_record = json.loads(record), json.loads(png.info['dpinfer'])
        assert ours.pop('file_name') == f'{stem}.webp' and png_record.pop('file_name') == f'{stem}.png', path
        assert ours == png_record, (path, ours, png_record)
        sizes[kind] = os.path.getsize(path)
    assert sizes['q10'] < sizes['lossy'], sizes
print('webp: lossy, lossless and quality 10 open in Pillow with their infotext and record')
PY
"$py" "$root/tools/fixtures/check_imagefolder.py" "$work/lossy"
