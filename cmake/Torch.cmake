# LibTorch from the PyPI torch wheel (shared/research/libtorch.md).
#
# Found through -DCMAKE_PREFIX_PATH or -DTorch_DIR, or else by asking the
# project's venv (tools/setup.sh makes it; DPINFER_VENV overrides where it is)
# for torch.utils.cmake_prefix_path. Sets:
#   DPINFER_HAVE_TORCH      ON when LibTorch was found
#   DPINFER_TORCH_HAS_CUDA  ON when that LibTorch build has CUDA (and so NCCL)
# The wheel's libraries carry an RPATH into site-packages/nvidia/*/lib, where
# tools/setup.sh puts the three NVIDIA libraries the CUDA toolkit lacks.
set(DPINFER_HAVE_TORCH OFF)
set(DPINFER_TORCH_HAS_CUDA OFF)
if(DPINFER_WITH_TORCH STREQUAL "OFF")
  return()
endif()

if(NOT Torch_DIR)
  if(NOT "$ENV{DPINFER_VENV}" STREQUAL "")  # set and not empty, as tools/setup.sh reads it
    set(_venv $ENV{DPINFER_VENV})
  else()
    set(_venv ${PROJECT_SOURCE_DIR}/.venv)
  endif()
  if(EXISTS ${_venv}/bin/python)
    execute_process(
      COMMAND ${_venv}/bin/python -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_VARIABLE _torch_error
      RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND EXISTS "${_torch_prefix}")
      list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
    elseif(DPINFER_WITH_TORCH STREQUAL "ON")
      string(REGEX REPLACE ".*\n([^\n]+)\n*$" "\\1" _torch_error "${_torch_error}")
      message(FATAL_ERROR "dpinfer: ${_venv}/bin/python cannot import torch: ${_torch_error}\n"
                          "Run tools/setup.sh, or configure with -DDPINFER_WITH_TORCH=OFF "
                          "(the launcher-only preset) to build without LibTorch.")
    endif()
  endif()
endif()

if(DPINFER_WITH_TORCH STREQUAL "ON")
  find_package(Torch CONFIG REQUIRED)
else()
  find_package(Torch CONFIG QUIET)
endif()
if(NOT Torch_FOUND)
  message(STATUS "dpinfer: LibTorch not found; building the launcher only (tools/setup.sh makes the venv)")
  return()
endif()
set(DPINFER_HAVE_TORCH ON)
if(TARGET torch_cuda)
  set(DPINFER_TORCH_HAS_CUDA ON)
endif()
message(STATUS "dpinfer: LibTorch ${Torch_VERSION} (CUDA: ${DPINFER_TORCH_HAS_CUDA})")

# dpinfer::torch: what dpinfer's LibTorch targets link instead of `torch`.
#  - libstdc++ comes first among the shared libraries: the wheel's libtorch.so and
#    libtorch_cpu.so export their own (GCC 13) copies of std::filesystem, and
#    when libtorch.so precedes libstdc++.so.6 its copy wins symbol lookup and
#    std::filesystem::remove_all jumps to address 0.
#  - FMT_HEADER_ONLY: LibTorch ships fmt 12 headers that shadow Debian's fmt 9 in
#    these translation units; header-only mode needs no fmt library to match.
add_library(dpinfer_torch INTERFACE)
target_link_options(dpinfer_torch INTERFACE "LINKER:--push-state,--no-as-needed" -lstdc++ "LINKER:--pop-state")
target_link_libraries(dpinfer_torch INTERFACE torch)
target_compile_definitions(dpinfer_torch INTERFACE FMT_HEADER_ONLY)
add_library(dpinfer::torch ALIAS dpinfer_torch)
