# Use ccache when it is installed, unless a launcher was chosen already.
find_program(DPINFER_CCACHE ccache)
if(DPINFER_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${DPINFER_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${DPINFER_CCACHE})
endif()
