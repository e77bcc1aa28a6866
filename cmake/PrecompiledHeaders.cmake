# Precompiled LibTorch headers (issue 25). A LibTorch translation unit spends nearly all of
# its compile time parsing ATen and torch/nn, not compiling dpinfer's own code
# (shared/research/libtorch.md, section 5: `-fsyntax-only` takes as long as -O2). So
# dpinfer_pipeline precompiles the LibTorch headers its files include, once, and every
# other LibTorch target (the worker library, the binaries, the torch tests, the bench)
# reuses that one PCH (REUSE_FROM): one ~35 s header parse instead of one per file.
#
# GCC takes a PCH only when it was built with the same code-generation options; a file
# with options of its own (-ffp-contract=off) is marked SKIP_PRECOMPILE_HEADERS and parses
# the headers itself. ccache caches files that use the PCH once its sloppiness allows
# (cmake/Ccache.cmake). -DDPINFER_PCH=OFF builds without it.
option(DPINFER_PCH "dpinfer: precompile the LibTorch headers (one PCH shared by every LibTorch target)" ON)

# dpinfer_torch_pch(target): `target` gets the LibTorch PCH; dpinfer_pipeline makes it and
# the others reuse it. A no-op with DPINFER_PCH off.
function(dpinfer_torch_pch target)
  if(NOT DPINFER_PCH)
    return()
  endif()
  if(target STREQUAL "dpinfer_pipeline")
    # What the pipeline's files include most (grep -rh '#include <' src include): ATen in
    # 69 files, torch/nn's Module, its holders and ModuleList in 30, InferenceMode in 27; the
    # layers nn/layers.h and the UNet bring in (Conv2d, Linear, GroupNorm: with them most of
    # torch/nn/functional and autograd's Function), which `g++ -H` showed every model and
    # family file parsing past the first list; fmt (LibTorch's, header-only: util/log.h); then
    # the standard and JSON headers every file has.
    target_precompile_headers(dpinfer_pipeline PRIVATE
      <ATen/ATen.h>
      <c10/core/InferenceMode.h>
      <torch/nn/module.h>
      <torch/nn/pimpl.h>
      <torch/nn/modules/container/modulelist.h>
      <torch/nn/modules/conv.h>
      <torch/nn/modules/linear.h>
      <torch/nn/modules/normalization.h>
      <fmt/format.h>
      <nlohmann/json.hpp>
      <functional>
      <map>
      <memory>
      <optional>
      <string>
      <vector>)
  else()
    target_precompile_headers(${target} REUSE_FROM dpinfer_pipeline)
  endif()
endfunction()
