// Ref: cache-dit 1.5.3 caching/cache_blocks/pattern_base.py (CachedBlocks_Pattern_Base.forward, call_Fn_blocks,
// call_Mn_blocks, call_Bn_blocks), caching/cache_contexts/cache_manager.py (can_cache, similarity, apply_cache,
// set_Fn_buffer, set_Bn_buffer, get_Bn_buffer), caching/cache_contexts/cache_context.py (mark_step_begin,
// add_cached_step, warmup_steps) and caching/cache_contexts/calibrators/taylorseer.py (TaylorSeerState).
#include "dpinfer/pipeline/nn/dbcache.h"

#include <algorithm>
#include <string>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline::nn {

// TaylorSeerState.update: dY_prev <- dY_current, dY_current <- derivative(Y). derivative(): dY[0] = Y and, for
// i < n_derivatives while dY_prev[i] is known and the state's step is past 1, dY[i + 1] = (dY[i] - dY_prev[i]) /
// window, window being the steps since the last computed one (a Python int).
void TaylorSeer::update(const at::Tensor& y) {
  if (!created_) {
    created_ = true;
    current_.assign(static_cast<size_t>(order_ + 1), at::Tensor());
  }
  previous_ = current_;
  if (previous_[0].defined() && !previous_[0].sizes().equals(y.sizes())) {
    // derivative()'s reset on a new shape (Z-Image once cfg_truncation drops an image's negative row): no
    // derivatives, and the step count restarts as for a state just created.
    previous_.assign(previous_.size(), at::Tensor());
    step_ = -1;
    last_computed_ = -1;
  }
  std::vector<at::Tensor> d(static_cast<size_t>(order_ + 1));
  d[0] = y;
  const int64_t window = step_ - last_computed_;
  for (int64_t i = 0; i < order_; ++i) {
    if (!previous_[i].defined() || step_ <= 1) break;
    d[i + 1] = at::div(at::sub(d[i], previous_[i]), at::Scalar(window));
  }
  current_ = std::move(d);
  last_computed_ = step_;
}

// TaylorSeerState.approximate: output = 0, then output += (1 / i!) * dY[i] * elapsed**i for each known dY[i],
// in that order of operations (a Python float, then a Python int; the first += is `dY[0] * ... + 0`).
at::Tensor TaylorSeer::approximate() const {
  const int64_t elapsed = step_ - last_computed_;
  at::Tensor out;
  double factorial = 1;
  int64_t power = 1;
  for (size_t i = 0; i < current_.size() && current_[i].defined(); ++i) {
    if (i > 0) {
      factorial *= static_cast<double>(i);
      power *= elapsed;
    }
    const at::Tensor term = at::mul(at::mul(current_[i], at::Scalar(1.0 / factorial)), at::Scalar(power));
    out = i == 0 ? at::add(term, at::Scalar(int64_t{0})) : at::add(out, term);
  }
  return out;
}

bool DBCache::begin_step_and_decide(Image& image, const at::Tensor& residual) const {
  // CachedContext.mark_step_begin: the step, the cache streak broken by a computed step, the calibrators' step.
  ++image.step;
  if (image.last_cached != image.step - 1) image.continuous = 0;
  if (options_.taylorseer_order > 0) {
    image.image_seer.begin_step();
    image.text_seer.begin_step();  // a no-op for a state never updated (no text stream)
  }
  // CachedContextManager.can_cache: no skip in the warm-up (steps 0 .. max_warmup_steps-1), past
  // max_cached_steps skipped steps or max_continuous_cached_steps in a row, or before a step has computed.
  if (image.step < options_.warmup) return false;
  if (options_.max_cached >= 0 && image.cached >= options_.max_cached) return false;
  if (options_.max_continuous >= 0 && image.continuous >= options_.max_continuous) return false;
  if (options_.threshold <= 0 || !image.fn_residual.defined()) return false;
  // similarity(): a threshold of 1 or more is "always similar"; residuals of another shape (Z-Image once
  // cfg_truncation drops an image's negative row) are not; else the relative abs-mean change of the Fn residual
  // against the last computed step's, as a Python float, below the threshold. (cache-dit tests the shape after the
  // threshold of 1, and would then fail adding the cached residual: dpinfer computes the step.)
  if (!residual.sizes().equals(image.fn_residual.sizes())) return false;
  if (options_.threshold >= 1.0) return true;
  return relative_change(residual, image.fn_residual) < options_.threshold;
}

void DBCache::store(Image& image, const at::Tensor& residual, const at::Tensor& image_residual,
                    const at::Tensor& text_residual) const {
  image.fn_residual = residual;
  image.middle_text = text_residual.defined();
  if (options_.taylorseer_order > 0) {
    image.image_seer.update(image_residual);
    if (text_residual.defined()) image.text_seer.update(text_residual);
  } else {
    image.image = image_residual;
    image.text = text_residual;
  }
}

namespace {

/// The rows `positions` (ascending) of `t`, as a tensor an image's buffers may keep: `t` itself when they are all of
/// it, else a copy, so that the buffers do not hold on to batch-mates' rows that later steps replace.
at::Tensor take(const at::Tensor& t, const std::vector<int64_t>& positions) {
  const auto n = static_cast<int64_t>(positions.size());
  if (n == t.size(0)) return t;
  if (n == 1) return t.narrow(0, positions.front(), 1).clone();
  return t.index_select(0, at::tensor(positions, at::kLong).to(t.device()));
}

/// Row b is image b, every token.
ImageRows each_row_an_image(int64_t rows, int64_t tokens) {
  ImageRows images;
  for (int64_t b = 0; b < rows; ++b) {
    images.rows.push_back({b});
    images.tokens.push_back(tokens);
  }
  return images;
}

}  // namespace

Streams DBCache::run(const Streams& input, int64_t num_blocks, const BlockRange& blocks, const ImageRows& grouping) {
  const int64_t fn = options_.fn, bn = options_.bn;
  if (fn < 1 || bn < 0 || fn + bn >= num_blocks)
    throw InputError("dbcache: dbcache_fn + dbcache_bn (" + std::to_string(fn) + " + " + std::to_string(bn) +
                     ") must be below the transformer's " + std::to_string(num_blocks) +
                     " blocks, leaving blocks in between to cache; lower them");
  // call_Fn_blocks on the whole batch, and the Fn residual of the image tokens.
  const Streams first = blocks(0, fn, input, {});
  const at::Tensor residual = first.image - input.image;  // [R, L, D]
  // A single-stream list (cache-dit's Pattern_3: Chroma's single_transformer_blocks, Z-Image's layers) has one
  // stream, the joint sequence as `image`, and no text stream (undefined): no encoder buffer, as cache-dit sets none.
  // Nor when the middle blocks end the text stream (SD3's last block, context_pre_only, in the middle with Bn 0):
  // call_Mn_blocks' encoder residual is None, and the blocks' output has no text stream, computed or cached.
  const bool text = input.text.defined();
  ImageRows images = grouping.rows.empty() ? each_row_an_image(residual.size(0), residual.size(1)) : grouping;
  if (images.tokens.empty()) images.tokens.assign(images.rows.size(), residual.size(1));
  const auto batch = static_cast<int64_t>(images.rows.size());
  if (images_.empty()) {
    images_.resize(static_cast<size_t>(batch));
    for (Image& image : images_) image.image_seer = image.text_seer = TaylorSeer(options_.taylorseer_order);
  } else if (static_cast<int64_t>(images_.size()) != batch) {
    throw Error("dbcache: a cache context got a batch of " + std::to_string(batch) + " after one of " +
                std::to_string(images_.size()));
  }
  // An image's Fn residual as its decision reads it: its rows, as far as its own tokens reach.
  const auto decision_residual = [&](int64_t i) {
    const at::Tensor rows = take(residual, images.rows[i]);
    const int64_t tokens = images.tokens[i];
    return tokens == rows.size(1) ? rows : rows.narrow(1, 0, tokens);
  };
  std::vector<int64_t> compute, cached;  // images
  std::vector<at::Tensor> decisions(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) {
    decisions[i] = decision_residual(i);
    (begin_step_and_decide(images_[i], decisions[i]) ? cached : compute).push_back(i);
  }
  count(batch, static_cast<int64_t>(cached.size()));

  const int64_t middle_end = num_blocks - bn;
  Streams out;
  if (cached.empty()) {
    // call_Mn_blocks for every image (always so at the first step): the whole batch as it comes; the Bn buffers
    // are the middle blocks' residuals.
    out = blocks(fn, middle_end, first, {});
    const at::Tensor image_residual = out.image - first.image;
    const at::Tensor text_residual = text && out.text.defined() ? out.text - first.text : at::Tensor();
    for (int64_t i = 0; i < batch; ++i)
      store(images_[i], decisions[i], take(image_residual, images.rows[i]),
            text_residual.defined() ? take(text_residual, images.rows[i]) : at::Tensor());
  } else {
    // apply_cache for the cached images: the cached residual (or TaylorSeer's extrapolation) plus the Fn output.
    // Whether the middle blocks return a text stream, as they did at each cached image's last computed step.
    const bool middle_text = text && images_[static_cast<size_t>(cached.front())].middle_text;
    out = {first.image.clone(), middle_text ? first.text.clone() : at::Tensor()};
    const bool seer = options_.taylorseer_order > 0;
    for (int64_t i : cached) {
      Image& image = images_[i];
      const std::vector<int64_t>& rows = images.rows[i];
      const auto add_cached = [&](at::Tensor& into, const at::Tensor& from, const at::Tensor& cached_residual) {
        if (rows.size() == 1) {
          into.narrow(0, rows.front(), 1).copy_(cached_residual + from.narrow(0, rows.front(), 1));
        } else {
          const at::Tensor index = at::tensor(rows, at::kLong).to(from.device());
          into.index_copy_(0, index, cached_residual + from.index_select(0, index));
        }
      };
      add_cached(out.image, first.image, seer ? image.image_seer.approximate() : image.image);
      if (middle_text) add_cached(out.text, first.text, seer ? image.text_seer.approximate() : image.text);
    }
    if (!compute.empty()) {
      // The computing images' rows, ascending, as one smaller batch.
      std::vector<int64_t> compute_rows;
      for (int64_t i : compute) compute_rows.insert(compute_rows.end(), images.rows[i].begin(), images.rows[i].end());
      std::sort(compute_rows.begin(), compute_rows.end());
      const at::Tensor rows = at::tensor(compute_rows, at::kLong).to(residual.device());
      const Streams part{first.image.index_select(0, rows), text ? first.text.index_select(0, rows) : at::Tensor()};
      const Streams middle = blocks(fn, middle_end, part, rows);
      if (middle.text.defined() != middle_text) throw Error("dbcache: the middle blocks' text stream came and went");
      out.image.index_copy_(0, rows, middle.image);
      if (middle_text) out.text.index_copy_(0, rows, middle.text);
      const at::Tensor image_residual = middle.image - part.image;
      const at::Tensor text_residual = middle_text ? middle.text - part.text : at::Tensor();
      for (int64_t i : compute) {
        std::vector<int64_t> positions;  // the image's rows within the smaller batch
        for (int64_t r : images.rows[i])
          positions.push_back(std::lower_bound(compute_rows.begin(), compute_rows.end(), r) - compute_rows.begin());
        store(images_[i], decisions[i], take(image_residual, positions),
              middle_text ? take(text_residual, positions) : at::Tensor());
      }
    }
    for (int64_t i : cached) {
      // add_cached_step
      Image& image = images_[i];
      ++image.cached;
      image.last_cached = image.step;
      ++image.continuous;
    }
  }
  // call_Bn_blocks on the whole batch, computed or cached.
  if (bn > 0) out = blocks(middle_end, num_blocks, out, {});
  return out;
}

}  // namespace dpinfer::pipeline::nn
