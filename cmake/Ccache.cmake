# Use ccache when it is installed, unless a launcher was chosen already.
#
# Its sloppiness lets it cache the files that use the LibTorch PCH
# (cmake/PrecompiledHeaders.cmake): ccache cannot see whether a precompiled header uses
# __TIME__ or which #defines it saw (pch_defines, time_macros), and the PCH is rebuilt with a
# new mtime whenever its target reconfigures (include_file_mtime, include_file_ctime).
# Given through `env`, so a user's own ccache configuration stays as it is otherwise.
find_program(DPINFER_CCACHE ccache)
if(DPINFER_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(_sloppiness "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime")
  set(CMAKE_CXX_COMPILER_LAUNCHER env ${_sloppiness} ${DPINFER_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER env ${_sloppiness} ${DPINFER_CCACHE})
endif()
