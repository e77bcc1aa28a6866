"""Trains dpinfer's embedded default model, `models/dpinfer-shapes-64`.

A Stable Diffusion 1.x pipeline in miniature (CLIP text encoder, UNet2DConditionModel,
AutoencoderKL, DPMSolverMultistepScheduler), trained from scratch on the shapes
dataset of shapes_dataset.py (64x64 pixels, 16x16x4 latents). It is small enough to
train on 2 CPU cores in well under an hour and to ship in the repository (~9 MB).

Recipe (all from --seed; the same seed, torch and diffusers versions give the same
weights on the same CPU):
  1. VAE: 1,500 steps of batch 16 on freshly rendered images, L1 + MSE
     reconstruction and a tiny KL term (SD's VAE used a KL weight of 1e-6 too).
  2. Latents: the training combinations x 48 renderings, encoded once; the
     scaling factor is 1 / std of the latents, as for SD's 0.18215.
  3. Text encoder + UNet, jointly: epsilon prediction under SD's scaled-linear
     1,000-step schedule, AdamW, 10% empty captions for classifier-free guidance,
     an EMA of the UNet and text encoder that is what ships.

Usage:  tools/train/train.sh            (venv, training, writes models/dpinfer-shapes-64)
        tools/train/train.sh --quick     (a few steps, to test the script)
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "fixtures"))

import clip_vocab  # noqa: E402  (tools/fixtures: the CLIP BPE vocabulary builder)
import shapes_dataset as ds  # noqa: E402

from diffusers import (AutoencoderKL, DDPMScheduler, DPMSolverMultistepScheduler,  # noqa: E402
                       StableDiffusionPipeline, UNet2DConditionModel)
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer  # noqa: E402

# The first 2,000 CLIP merges: every dataset word is 1-3 tokens, any prompt still tokenizes.
NUM_MERGES = 2000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_vae() -> AutoencoderKL:
    # 64x64x3 <-> 16x16x4: three blocks, two downsamples. No mid-block attention:
    # one shape per image needs no global mixing in the VAE.
    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 3,
                         up_block_types=["UpDecoderBlock2D"] * 3, block_out_channels=(16, 32, 32),
                         layers_per_block=1, latent_channels=4, norm_num_groups=8, sample_size=64,
                         mid_block_add_attention=False)


def make_unet() -> UNet2DConditionModel:
    # Cross-attention at 8x8 and 4x4 (and the mid block) only: the 16x16 level is
    # convolutional, which keeps CPU training fast; 8x8 is fine enough for 5 positions.
    return UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(32, 64, 64),
                                down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
                                cross_attention_dim=64, attention_head_dim=4, norm_num_groups=16)


def make_text_encoder(vocab_size: int, bos: int, eos: int) -> CLIPTextModel:
    return CLIPTextModel(CLIPTextConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=256,
                                        num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=77,
                                        projection_dim=64, bos_token_id=bos, eos_token_id=eos, pad_token_id=eos))


def make_train_scheduler() -> DDPMScheduler:
    return DDPMScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                         clip_sample=False, steps_offset=1)


def to_tensor(images: list[np.ndarray]) -> torch.Tensor:
    """uint8 HxWx3 images -> float Bx3xHxW in [-1, 1]."""
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float()
    return x / 127.5 - 1.0


def train_vae(vae: AutoencoderKL, steps: int, rng: np.random.Generator, train: list[tuple]) -> None:
    opt = torch.optim.AdamW(vae.parameters(), lr=2e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100) * 0.5 *
                                              (1 + math.cos(math.pi * s / steps)))
    vae.train()
    for step in range(steps):
        combos = [train[i] for i in rng.integers(0, len(train), 16)]
        x = to_tensor([ds.render(*c, rng) for c in combos])
        posterior = vae.encode(x).latent_dist
        recon = vae.decode(posterior.sample()).sample
        kl = posterior.kl().mean() / (64 * 64 * 3)
        loss = F.l1_loss(recon, x) + F.mse_loss(recon, x) + 1e-6 * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"vae step {step}/{steps} loss {loss.item():.4f} (max|err| {float((recon - x).abs().max()):.3f})")
    vae.eval()


@torch.no_grad()
def encode_latents(vae: AutoencoderKL, rng: np.random.Generator, train: list[tuple],
                   per_combo: int) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    means, stds, captions = [], [], []
    for c in train:
        x = to_tensor([ds.render(*c, rng) for _ in range(per_combo)])
        dist = vae.encode(x).latent_dist
        means.append(dist.mean)
        stds.append(dist.std)
        captions += [ds.caption(*c)] * per_combo
    return torch.cat(means), torch.cat(stds), captions


class Ema:
    """Exponential moving average of parameters, with the usual warm-up of the decay."""

    def __init__(self, module: torch.nn.Module, decay: float):
        self.shadow = copy.deepcopy(module).eval()
        self.decay = decay
        self.updates = 0

    @torch.no_grad()
    def update(self, module: torch.nn.Module) -> None:
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for s, p in zip(self.shadow.parameters(), module.parameters()):
            s.mul_(d).add_(p.detach(), alpha=1 - d)


def optimize(loss: torch.Tensor, opt, sched, params: list, emas: list) -> None:
    """One training step of both training scripts: AdamW on the gradients clipped to norm 1, the schedule,
    then each (Ema, module) pair's average."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()
    for ema, module in emas:
        ema.update(module)


def log_progress(what: str, step: int, steps: int, loss: torch.Tensor, sched, t0: float) -> None:
    """Every 100 steps and at the last: the loss, the learning rate and the rate so far."""
    if step % 100 == 0 or step == steps - 1:
        rate = (step + 1) / (time.time() - t0)
        log(f"{what} step {step}/{steps} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e} "
            f"({rate:.2f} steps/s, ETA {(steps - step - 1) / rate / 60:.1f} min)")


def write_model_notes(out: str, recipe: dict) -> None:
    """dataset.json (what tools/check_shapes judges by) and training.json (the recipe) beside the model."""
    with open(os.path.join(out, "dataset.json"), "w") as f:
        json.dump(ds.description(), f, indent=1)
        f.write("\n")
    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump(recipe, f, indent=2)
        f.write("\n")


def save_pipeline(out: str, vae, tokenizer, text_encoder, unet) -> None:
    scheduler = DPMSolverMultistepScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                                            beta_schedule="scaled_linear", steps_offset=1)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                   scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.save_pretrained(out, safe_serialization=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "models", "dpinfer-shapes-64"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vae-steps", type=int, default=1500)
    ap.add_argument("--unet-steps", type=int, default=6000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpoint-every", type=int, default=0, help="also save the EMA pipeline to OUT-stepN")
    ap.add_argument("--quick", action="store_true", help="a few steps of each stage, to test the script")
    args = ap.parse_args()
    if args.quick:
        args.vae_steps, args.unet_steps = 3, 3
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train, held = ds.split()
    log(f"{len(train)} training combinations, {len(held)} held out; seed {args.seed}")
    started = time.time()

    import tempfile
    tok_dir = tempfile.mkdtemp()
    clip_vocab.write_tokenizer_dir(tok_dir, NUM_MERGES)
    tokenizer = CLIPTokenizer.from_pretrained(tok_dir)
    vae = make_vae()
    train_vae(vae, args.vae_steps, rng, train)

    means, stds, captions = encode_latents(vae, rng, train, 4 if args.quick else 48)
    scaling = float(1.0 / means.std())
    vae.register_to_config(scaling_factor=scaling)
    log(f"{len(captions)} latents, std {means.std():.4f}: scaling_factor {scaling:.5f}")

    text_encoder = make_text_encoder(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id)
    unet = make_unet()
    noise_sched = make_train_scheduler()
    ids_all = tokenizer(captions + [""], padding="max_length", max_length=tokenizer.model_max_length,
                        truncation=True, return_tensors="pt").input_ids
    ids_empty, ids_all = ids_all[-1], ids_all[:-1]
    params = list(unet.parameters()) + list(text_encoder.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-2)
    steps = args.unet_steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 200) * (0.1 + 0.9 * 0.5 *
                                              (1 + math.cos(math.pi * s / steps))))
    ema_unet, ema_text = Ema(unet, 0.999), Ema(text_encoder, 0.999)
    alphas = noise_sched.alphas_cumprod
    gen = torch.Generator().manual_seed(args.seed + 1)
    unet.train()
    text_encoder.train()
    t0 = time.time()
    for step in range(steps):
        idx = torch.randint(0, len(captions), (args.batch_size,), generator=gen)
        latents = (means[idx] + stds[idx] * torch.randn(means[idx].shape, generator=gen)) * scaling
        ids = ids_all[idx].clone()
        drop = torch.rand(args.batch_size, generator=gen) < 0.1
        ids[drop] = ids_empty
        noise = torch.randn(latents.shape, generator=gen)
        t = torch.randint(0, noise_sched.config.num_train_timesteps, (args.batch_size,), generator=gen)
        a = alphas[t].view(-1, 1, 1, 1)
        noisy = a.sqrt() * latents + (1 - a).sqrt() * noise
        cond = text_encoder(ids)[0]
        pred = unet(noisy, t, cond).sample
        loss = F.mse_loss(pred, noise)
        optimize(loss, opt, sched, params, [(ema_unet, unet), (ema_text, text_encoder)])
        if args.checkpoint_every and (step + 1) % args.checkpoint_every == 0 and step + 1 < steps:
            save_pipeline(f"{args.out}-step{step + 1}", vae, tokenizer, ema_text.shadow, ema_unet.shadow)
        log_progress("unet", step, steps, loss, sched, t0)

    save_pipeline(args.out, vae, tokenizer, ema_text.shadow, ema_unet.shadow)
    recipe = {"seed": args.seed, "vae_steps": args.vae_steps, "unet_steps": steps, "batch_size": args.batch_size,
              "lr": args.lr, "threads": args.threads, "num_merges": NUM_MERGES, "scaling_factor": scaling,
              "training_combinations": len(train), "held_out_combinations": len(held),
              "minutes": round((time.time() - started) / 60, 1), "torch": torch.__version__,
              "final_loss": round(loss.item(), 5)}
    write_model_notes(args.out, recipe)
    log(f"wrote {args.out} in {recipe['minutes']} min")


if __name__ == "__main__":
    main()
