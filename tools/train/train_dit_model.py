"""Trains dpinfer's second embedded model, `models/dpinfer-shapes-dit-64`: a flow-matching DiT.

A Z-Image pipeline in miniature (diffusers' ZImagePipeline: Qwen3 text encoder, ZImageTransformer2DModel,
AutoencoderKL, FlowMatchEulerDiscreteScheduler), trained from scratch on the shapes dataset of
shapes_dataset.py, the same captions and the same held-out split as models/dpinfer-shapes-64. It exists so
that the step caches, fp8 storage and few-step schedules, which random-weight fixtures can only show to be
exact, can be measured for quality on a DiT (tools/bench/default_dit_quality.sh).

Recipe (all from --seed; the same seed, torch and diffusers versions give the same weights on the same CPU):
  1. VAE: the SD default model's (models/dpinfer-shapes-64/vae: 64x64x3 <-> 16x16x4), reused unchanged;
     Z-Image's shift_factor and scaling_factor are the mean and 1 / std of its latents of the training set.
  2. Tokenizer: Qwen2's byte-level BPE cut to its first 3,000 tokens (tests/data/tokenizer/qwen2-small, the
     tiny-z-image-alt fixture's), with Qwen3's chat template, as ZImagePipeline renders every prompt.
  3. Text encoder + transformer, jointly: rectified flow (x_t = (1 - s) x0 + s noise, target x0 - noise,
     the sign ZImagePipeline undoes with `noise_pred = -noise_pred`; timestep input 1 - s), s drawn from a
     logit-normal as SD3 trains; AdamW, 10% empty captions for classifier-free guidance, an EMA that is what
     ships. Captions go through the text encoder unpadded (right padding + the attention mask, then the
     mask's rows of hidden_states[-2]), as the pipeline takes them.
  The transformer and text encoder are stored in bfloat16 (the VAE in float32, as shipped with the SD model),
  which keeps the folder under 10 MB; dpinfer and diffusers compute in float32 from those weights.

Usage:  tools/train/train.sh --dit            (venv, training, writes models/dpinfer-shapes-dit-64)
        tools/train/train.sh --dit --quick    (a few steps, to test the script)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)

import shapes_dataset as ds  # noqa: E402
from train_default_model import Ema, encode_latents, log, log_progress, optimize, write_model_notes  # noqa: E402

import numpy as np  # noqa: E402
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler  # noqa: E402
from diffusers import ZImagePipeline, ZImageTransformer2DModel  # noqa: E402
from transformers import AutoTokenizer, Qwen3Config, Qwen3Model  # noqa: E402

SD_MODEL = os.path.join(root, "models", "dpinfer-shapes-64")
SMALL_TOKENIZER = os.path.join(root, "tests", "data", "tokenizer", "qwen2-small")
QWEN3_TOKENIZER = os.path.join(root, "tests", "data", "tokenizer", "qwen2-qwen3")
VOCAB = 3072  # qwen2-small's 3,000 tokens and 22 added ones, rounded up


def make_tokenizer():
    tokenizer = AutoTokenizer.from_pretrained(SMALL_TOKENIZER)
    with open(os.path.join(QWEN3_TOKENIZER, "tokenizer_config.json")) as f:
        tokenizer.chat_template = json.load(f)["chat_template"]
    return tokenizer


def make_text_encoder() -> Qwen3Model:
    # Z-Image reads hidden_states[-2], so the last layer never reaches the image: 3 layers, 2 used.
    return Qwen3Model(Qwen3Config(hidden_size=64, intermediate_size=192, num_hidden_layers=3, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=16, vocab_size=VOCAB, max_position_embeddings=128,
                                  rms_norm_eps=1e-6, tie_word_embeddings=False))


def make_transformer() -> ZImageTransformer2DModel:
    # 16x16x4 latents in 2x2 patches: 64 image tokens. Head dim 32 = axes_dims (caption/frame, row, column);
    # the RoPE table covers 8x8 patches, 64x64 pixels, the one size it is trained at (and so its default size).
    transformer = ZImageTransformer2DModel(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=4, dim=128,
                                           n_layers=4, n_refiner_layers=1, n_heads=4, n_kv_heads=4, norm_eps=1e-5,
                                           qk_norm=True, cap_feat_dim=64, rope_theta=256.0, t_scale=1000.0,
                                           axes_dims=[8, 12, 12], axes_lens=[256, 8, 8])
    # diffusers 0.36 creates the two pad tokens with torch.empty and never initialises them: whatever the memory
    # held (a NaN, at times) would reach the loss through the padded caption rows.
    with torch.no_grad():
        torch.nn.init.normal_(transformer.x_pad_token, std=0.02)
        torch.nn.init.normal_(transformer.cap_pad_token, std=0.02)
    return transformer


def chat(tokenizer, text: str) -> str:
    """ZImagePipeline._encode_prompt's rendering of one prompt."""
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=True)


def encode(text_encoder: Qwen3Model, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    states = text_encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-2]
    return [states[i][mask[i]] for i in range(ids.shape[0])]


def save_pipeline(out: str, vae, tokenizer, text_encoder, transformer) -> None:
    pipe = ZImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae,
                          text_encoder=_bf16_copy(text_encoder), tokenizer=tokenizer,
                          transformer=_bf16_copy(transformer))
    pipe.save_pretrained(out, safe_serialization=True)


def _bf16_copy(module: torch.nn.Module) -> torch.nn.Module:
    import copy
    return copy.deepcopy(module).to(torch.bfloat16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(root, "models", "dpinfer-shapes-dit-64"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sigmas", choices=["logit-normal", "mixed"], default="mixed",
                    help="the noise levels trained on: SD3's logit-normal, or half of each batch uniform in (0, 1)")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="also save the EMA pipeline to OUT-stepN")
    ap.add_argument("--quick", action="store_true", help="a few steps, to test the script")
    args = ap.parse_args()
    if args.quick:
        args.steps = 3
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train, held = ds.split()
    log(f"{len(train)} training combinations, {len(held)} held out; seed {args.seed}")
    started = time.time()

    vae = AutoencoderKL.from_pretrained(os.path.join(SD_MODEL, "vae")).eval()
    means, stds, captions = encode_latents(vae, rng, train, 4 if args.quick else 48)
    shift, scaling = float(means.mean()), float(1.0 / means.std())
    vae.register_to_config(shift_factor=shift, scaling_factor=scaling)
    log(f"{len(captions)} latents, mean {shift:.4f}, std {means.std():.4f}: scaling_factor {scaling:.5f}")

    tokenizer = make_tokenizer()
    text_encoder = make_text_encoder()
    transformer = make_transformer()
    log(f"parameters: transformer {sum(p.numel() for p in transformer.parameters()):,}, "
        f"text encoder {sum(p.numel() for p in text_encoder.parameters()):,}")
    unique = sorted(set(captions)) + [""]
    tok = tokenizer([chat(tokenizer, c) for c in unique], padding=True, return_tensors="pt")
    row_of = {c: i for i, c in enumerate(unique)}
    caption_rows = torch.tensor([row_of[c] for c in captions])
    empty_row = row_of[""]

    params = list(transformer.parameters()) + list(text_encoder.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-2)
    steps = args.steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 200) * (0.1 + 0.9 * 0.5 *
                                              (1 + math.cos(math.pi * s / steps))))
    ema_transformer, ema_text = Ema(transformer, 0.999), Ema(text_encoder, 0.999)
    gen = torch.Generator().manual_seed(args.seed + 1)
    transformer.train()
    text_encoder.train()
    t0 = time.time()
    for step in range(steps):
        idx = torch.randint(0, len(captions), (args.batch_size,), generator=gen)
        x0 = ((means[idx] + stds[idx] * torch.randn(means[idx].shape, generator=gen)) - shift) * scaling
        rows = caption_rows[idx].clone()
        rows[torch.rand(args.batch_size, generator=gen) < 0.1] = empty_row
        noise = torch.randn(x0.shape, generator=gen)
        s = torch.sigmoid(torch.randn(args.batch_size, generator=gen))
        if args.sigmas == "mixed":
            uniform = torch.rand(args.batch_size, generator=gen)
            s = torch.where(torch.arange(args.batch_size) % 2 == 1, uniform, s)
        s = s.view(-1, 1, 1, 1)
        xt = (1 - s) * x0 + s * noise
        # Drop the batch's common right padding, so the text encoder sees only as many columns as needed.
        ids, mask = tok.input_ids[rows], tok.attention_mask[rows].bool()
        width = int(mask.sum(1).max())
        cap = encode(text_encoder, ids[:, :width], mask[:, :width])
        out = transformer(list(xt.unsqueeze(2).unbind(0)), (1 - s).flatten(), cap, return_dict=False)[0]
        pred = torch.stack(out).squeeze(2)
        loss = F.mse_loss(pred, x0 - noise)
        optimize(loss, opt, sched, params, [(ema_transformer, transformer), (ema_text, text_encoder)])
        if args.checkpoint_every and (step + 1) % args.checkpoint_every == 0 and step + 1 < steps:
            save_pipeline(f"{args.out}-step{step + 1}", vae, tokenizer, ema_text.shadow, ema_transformer.shadow)
        log_progress("dit", step, steps, loss, sched, t0)

    shutil.rmtree(args.out, ignore_errors=True)
    save_pipeline(args.out, vae, tokenizer, ema_text.shadow, ema_transformer.shadow)
    recipe = {"seed": args.seed, "steps": steps, "batch_size": args.batch_size, "lr": args.lr, "sigmas": args.sigmas,
              "threads": args.threads, "vae": "models/dpinfer-shapes-64/vae", "shift_factor": shift,
              "scaling_factor": scaling, "training_combinations": len(train), "held_out_combinations": len(held),
              "minutes": round((time.time() - started) / 60, 1), "torch": torch.__version__,
              "final_loss": round(loss.item(), 5)}
    write_model_notes(args.out, recipe)
    log(f"wrote {args.out} in {recipe['minutes']} min")


if __name__ == "__main__":
    main()
