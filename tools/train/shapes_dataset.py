"""The procedural captioned dataset the default model is trained on.

Every image is one flat-coloured shape on a flat background, 64x64 RGB:
    shape      circle | square | triangle
    colour     red | green | blue | yellow | purple
    position   top left | top right | bottom left | bottom right | center
    background white | black | gray
and its caption reads "a red circle in the top left on a white background".

The 225 combinations are split once, from a fixed seed, into training and
held-out sets. The held-out combinations (HELD_OUT_COUNT of them) are never
rendered for training; the checker (tools/check_shapes) generates them with the
C++ pipeline and measures colour and shape. The split keeps every pair of
attribute values (e.g. purple + triangle, triangle + top left) in the training
set, so held-out captions are new compositions of seen parts.

Only numpy: the same renderer is the reference the checker's thresholds are
written against (see tools/check_shapes.cpp).
"""
from __future__ import annotations

import itertools
import random

import numpy as np

SIZE = 64
SHAPES = ["circle", "square", "triangle"]
COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 180, 40),
    "blue": (30, 60, 220),
    "yellow": (240, 220, 30),
    "purple": (150, 40, 190),
}
POSITIONS = {  # centre of the shape in pixels (x, y)
    "top left": (18, 18),
    "top right": (46, 18),
    "bottom left": (18, 46),
    "bottom right": (46, 46),
    "center": (32, 32),
}
BACKGROUNDS = {"white": (245, 245, 245), "black": (15, 15, 15), "gray": (128, 128, 128)}
HELD_OUT_COUNT = 60
SPLIT_SEED = 20261202


def caption(shape: str, colour: str, position: str, background: str) -> str:
    where = "in the center" if position == "center" else f"in the {position}"
    return f"a {colour} {shape} {where} on a {background} background"


def all_combinations() -> list[tuple[str, str, str, str]]:
    return list(itertools.product(SHAPES, COLOURS, POSITIONS, BACKGROUNDS))


def _pairs(c: tuple[str, ...]) -> set[tuple[int, str, int, str]]:
    return {(i, c[i], j, c[j]) for i in range(4) for j in range(i + 1, 4)}


def split() -> tuple[list[tuple], list[tuple]]:
    """(train, held_out): a seeded shuffle, holding a combination out only when
    every attribute pair it has still occurs in the training set."""
    combos = all_combinations()
    rng = random.Random(SPLIT_SEED)
    order = combos[:]
    rng.shuffle(order)
    train = set(combos)
    held: list[tuple] = []
    for c in order:
        if len(held) == HELD_OUT_COUNT:
            break
        rest = train - {c}
        covered = set().union(*(_pairs(t) for t in rest))
        if _pairs(c) <= covered:
            train = rest
            held.append(c)
    if len(held) != HELD_OUT_COUNT:
        raise SystemExit("could not hold out enough combinations")
    return sorted(train), sorted(held)


def render(shape: str, colour: str, position: str, background: str, rng: np.random.Generator) -> np.ndarray:
    """One image, HxWx3 uint8. The shape's size and centre jitter a little, so the
    model learns shapes rather than 225 fixed pictures."""
    img = np.empty((SIZE, SIZE, 3), np.uint8)
    img[:] = BACKGROUNDS[background]
    cx, cy = POSITIONS[position]
    cx += rng.integers(-3, 4)
    cy += rng.integers(-3, 4)
    r = rng.uniform(9.0, 12.0)  # half the shape's extent
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) + 0.5
    if shape == "circle":
        mask = (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r
    elif shape == "square":
        s = r * 0.9
        mask = (np.abs(xx - cx) <= s) & (np.abs(yy - cy) <= s)
    else:  # an upright isosceles triangle in the box [cx-r, cx+r] x [cy-r, cy+r]
        top, bottom = cy - r, cy + r
        half = (yy - top) / (2 * r) * r  # half-width grows linearly towards the base
        mask = (yy >= top) & (yy <= bottom) & (np.abs(xx - cx) <= half)
    img[mask] = COLOURS[colour]
    return img


def description() -> dict:
    """What tools/check_shapes needs to judge an image: the palette, the layout
    and the split. Written next to the model as dataset.json."""
    train, held = split()
    return {"size": SIZE, "shapes": SHAPES, "colours": {k: list(v) for k, v in COLOURS.items()},
            "positions": {k: list(v) for k, v in POSITIONS.items()},
            "backgrounds": {k: list(v) for k, v in BACKGROUNDS.items()},
            "caption_template": "a {colour} {shape} in the {position} on a {background} background",
            "training_captions": [caption(*c) for c in train], "held_out_captions": [caption(*c) for c in held]}


if __name__ == "__main__":
    import argparse
    import json
    import os

    ap = argparse.ArgumentParser(description="Writes the held-out prompt file and prints the split.")
    ap.add_argument("--prompts", help="write the held-out captions here, one per line")
    args = ap.parse_args()
    d = description()
    print(len(d["training_captions"]), "training combinations,", len(d["held_out_captions"]), "held out")
    if args.prompts:
        os.makedirs(os.path.dirname(os.path.abspath(args.prompts)), exist_ok=True)
        with open(args.prompts, "w", encoding="utf-8") as f:
            f.write("".join(c + "\n" for c in d["held_out_captions"]))
