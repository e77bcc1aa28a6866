# Third-party packages from a carried folder instead of Debian's -dev packages, for a
# machine that has a compiler, CMake and LibTorch but none of those packages and no
# network: the lent GPU machine (tools/device/README.md). Dependencies.cmake includes
# this file only when -DDPINFER_DEPS_DIR=<dir> is given; the normal build never reads it.
#
# tools/device/prepare_carry.sh fills <dir> (third_party_cache/device):
#   include/      CLI/, nlohmann/, spdlog/, fmt/ and stb/stb_image_write.h, Debian's headers
#   googletest/   Debian's GoogleTest sources (/usr/src/googletest)
#   sentencepiece/  SentencePiece's header and shared library (the T5 tokenizer), found by
#                 Dependencies.cmake when LibTorch is there
#
# - CLI11, nlohmann_json, fmt and spdlog always come from <dir>/include, whatever the
#   machine has: fmt header-only (FMT_HEADER_ONLY), spdlog header-only (no
#   SPDLOG_COMPILED_LIB) on that external fmt, so no library of another build is ever
#   mixed in. They are imported targets, so <dir>/include is a -isystem directory and
#   comes before /usr/include: the carried headers win over a system copy. stb has no
#   CMake package; png_writer.cpp finds <stb/stb_image_write.h> there too.
# - GoogleTest: the machine's own when find_package finds it, else built from
#   <dir>/googletest (gtest and gtest_main only, nothing installed).
# - libpng: the machine's own when found, else not at all: tests/CMakeLists.txt then
#   leaves out dpinfer_worker_tests, the only target that needs it.

if(NOT IS_DIRECTORY "${DPINFER_DEPS_DIR}/include")
  message(FATAL_ERROR "DPINFER_DEPS_DIR=${DPINFER_DEPS_DIR} has no include/ folder; "
                      "tools/device/prepare_carry.sh fills it")
endif()
get_filename_component(_carried "${DPINFER_DEPS_DIR}" ABSOLUTE)
message(STATUS "dpinfer: CLI11, nlohmann_json, fmt and spdlog from ${_carried}/include (header-only)")

# dpinfer_carried_target(NAME DEFINITIONS...): an interface target on the carried headers.
function(dpinfer_carried_target name)
  add_library(${name} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_carried}/include"
                                           INTERFACE_COMPILE_DEFINITIONS "${ARGN}")
endfunction()

dpinfer_carried_target(CLI11::CLI11)
dpinfer_carried_target(nlohmann_json::nlohmann_json)
dpinfer_carried_target(fmt::fmt FMT_HEADER_ONLY=1)
dpinfer_carried_target(spdlog::spdlog SPDLOG_FMT_EXTERNAL)
set_property(TARGET spdlog::spdlog PROPERTY INTERFACE_LINK_LIBRARIES fmt::fmt Threads::Threads)

if(DPINFER_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  if(GTest_FOUND)
    message(STATUS "dpinfer: GoogleTest ${GTest_VERSION} from the system")
  else()
    if(NOT EXISTS "${_carried}/googletest/CMakeLists.txt")
      message(FATAL_ERROR "no GoogleTest on this machine and none in ${_carried}/googletest")
    endif()
    message(STATUS "dpinfer: GoogleTest built from ${_carried}/googletest")
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory("${_carried}/googletest" "${CMAKE_BINARY_DIR}/_deps/googletest" EXCLUDE_FROM_ALL SYSTEM)
  endif()

  find_package(PNG QUIET)
  if(NOT PNG_FOUND)
    message(STATUS "dpinfer: no libpng: dpinfer_worker_tests (the PNG-reading tests) are left out")
  endif()
endif()
