#pragma once
// Bit identity with a golden holds only on a CPU that does float arithmetic in the order of the
// machine that recorded it. PyTorch's CPU kernels (MKL's sgemm, oneDNN's bf16 matmuls, SLEEF's
// vector sin/cos) choose their blocking, and so the order of a reduction's sums, by the CPU they
// run on: the same torch 2.11 wheel gives float32 results an ulp apart on an AVX-512 AMD EPYC and
// on the machine that recorded most of tests/data, while dpinfer matches diffusers bit for bit on
// either. Tests therefore assert bit identity where this CPU computes as the recording machine
// did, which a canary computation tells (tools/fixtures/cpu_canary.py), and the parity bound
// elsewhere.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <string>

namespace dpinfer::test {

/// The CLIP text encoder of model fixture `fixture` (tiny-sd1's, in some fp8 storage) run by dpinfer
/// in float32 on tiny-sd1-te-fp8.golden's token ids: its last_hidden_state [1, 77, 32].
at::Tensor clip_last_hidden_state(const std::string& fixture);

/// clip_last_hidden_state("tiny-sd1-te-e4m3") on one thread (weights F8_E4M3 holds, exact in
/// float32), as tools/fixtures/cpu_canary.py computes it with torch. Computed once.
at::Tensor cpu_canary();

/// The same with the model in `dtype` (kFloat, kBFloat16 or kHalf; F8_E4M3's values are exact in
/// each), as cpu_canary.py's cpu_canary(dtype): [4, 77, 32] in `dtype` (the golden's four prompts).
/// The half-precision variants tell a CPU's bf16 and fp16 kernels, which it picks by its own
/// instructions (oneDNN's AVX512-BF16 and AMX-BF16 dot products, AVX512-FP16): an Intel Xeon with
/// AMX gives the float32 canary of the machine that recorded most of tests/data bit for bit, and
/// yet rounds bf16 otherwise (up to 8 levels of 255 after a pipeline's steps; issue 25's baseline
/// run). Computed once per dtype.
at::Tensor cpu_canary(at::ScalarType dtype);

/// Whether this CPU computes as the machine that recorded `recorded_canary` (a golden's
/// "cpu_canary"); an undefined tensor means the machine that recorded the goldens that have none
/// (make_fp8_fixtures.py's tiny-sd1-te-e4m3.last_hidden_state). Computed once.
bool recorded_on_this_cpu(const at::Tensor& recorded_canary = at::Tensor());

/// Whether this CPU computes float32, bf16 and fp16 as the machine that recorded the half-precision
/// goldens beside `canary_file` (make_half_pipelines.py's cpu_canary.safetensors: "cpu_canary",
/// "cpu_canary_bf16", "cpu_canary_fp16"): all three canaries equal this CPU's, by measurement. Says
/// so in the output where they do not. Computed once per file.
bool half_recorded_on_this_cpu(const std::string& canary_file);

/// EXPECTs `actual` and `expected` bit-identical where recorded_on_this_cpu(`recorded_canary`);
/// elsewhere within the parity bound (model_goldens.h expect_close), saying why.
void expect_bit_identical_on_recording_cpu(const at::Tensor& actual, const at::Tensor& expected,
                                           const std::string& what, const at::Tensor& recorded_canary = at::Tensor());

/// Runs the enclosing scope on one intra-op thread, as the fixture scripts record their goldens
/// (torch.set_num_threads(1)): oneDNN's float32 convolutions sum in a thread-dependent order.
class OneThread {
 public:
  OneThread() : threads_(at::get_num_threads()) { at::set_num_threads(1); }
  ~OneThread() { at::set_num_threads(threads_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int threads_;
};

}  // namespace dpinfer::test
