"""A contact sheet of a dpinfer output folder, for the README.

    tools/fixtures/.venv/bin/python tools/train/contact_sheet.py OUT SHEET.png [--report REPORT.json]

Lays out OUT's images in metadata.jsonl order, each scaled up 2x with its caption
under it. With a dpinfer_check_shapes --report, a green frame marks an image whose
colour and shape match its caption and a red frame one that does not.
"""
from __future__ import annotations

import argparse
import json
import os
import textwrap

from PIL import Image, ImageDraw, ImageFont


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("sheet")
    ap.add_argument("--report")
    ap.add_argument("--columns", type=int, default=10)
    ap.add_argument("--scale", type=int, default=2)
    a = ap.parse_args()

    rows = [json.loads(line) for line in open(os.path.join(a.out, "metadata.jsonl")) if line.strip()]
    verdict = {}
    if a.report:
        verdict = {r["image"]: r["correct"] for r in json.load(open(a.report))["images"]}
    font = ImageFont.load_default()
    first = Image.open(os.path.join(a.out, rows[0]["file_name"]))
    w, h = first.width * a.scale, first.height * a.scale
    pad, caption_lines, line_h = 6, 4, 11
    cell_w, cell_h = w + 2 * pad, h + 2 * pad + caption_lines * line_h
    n_rows = (len(rows) + a.columns - 1) // a.columns
    sheet = Image.new("RGB", (cell_w * a.columns, cell_h * n_rows), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for i, row in enumerate(rows):
        x, y = (i % a.columns) * cell_w, (i // a.columns) * cell_h
        img = Image.open(os.path.join(a.out, row["file_name"])).convert("RGB").resize((w, h), Image.NEAREST)
        ok = verdict.get(row["file_name"])
        if ok is not None:
            draw.rectangle([x + 2, y + 2, x + pad + w + 3, y + pad + h + 3], fill=(40, 160, 60) if ok else (210, 40, 40))
        sheet.paste(img, (x + pad, y + pad))
        caption = row["prompt"].removeprefix("a ").replace(" background", "")
        for k, line in enumerate(textwrap.wrap(caption, width=22)[:caption_lines]):
            draw.text((x + pad, y + 2 * pad + h + k * line_h), line, fill=(30, 30, 30), font=font)
    sheet.save(a.sheet, optimize=True)
    print(f"{len(rows)} images -> {a.sheet} ({sheet.width}x{sheet.height})")


if __name__ == "__main__":
    main()
