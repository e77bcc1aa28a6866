# Third-party packages. All come from find_package (Debian's -dev packages, see
# tools/setup.sh); nothing is downloaded at configure time.
#
# -DDPINFER_DEPS_DIR=<dir> takes them from a carried folder instead, for a machine
# without these packages (the lent GPU machine): see cmake/CarriedDeps.cmake.
set(DPINFER_DEPS_DIR "" CACHE PATH "dpinfer: a folder of carried headers and sources to use instead of the system packages")
find_package(Threads REQUIRED)
# OpenSSL's libcrypto: SHA-256 for the infotext's Model hash and Lora hashes (worker/model_hashes.cpp).
# A carried folder (tools/device/prepare_carry.sh) holds it under <dir>/openssl.
if(DPINFER_DEPS_DIR AND NOT OPENSSL_ROOT_DIR)
  get_filename_component(OPENSSL_ROOT_DIR "${DPINFER_DEPS_DIR}/openssl" ABSOLUTE)
endif()
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
if(DPINFER_DEPS_DIR)
  include(CarriedDeps)
else()
  find_package(CLI11 CONFIG REQUIRED)
  find_package(fmt CONFIG REQUIRED)
  find_package(spdlog CONFIG REQUIRED)
  find_package(nlohmann_json 3 CONFIG REQUIRED)
  if(DPINFER_BUILD_TESTS)
    find_package(GTest CONFIG REQUIRED)
    find_package(PNG REQUIRED)  # libpng: the tests' independent PNG reader
  endif()
endif()

include(Torch)
include(Arrow)

# libwebp and libwebpmux (Debian's libwebp-dev): --image-format webp (io/webp_writer.cpp),
# linked by dpinfer_io. A carried folder (tools/device/prepare_carry.sh) holds their headers
# and static libraries under <dir>/webp.
set(_webp_hints "")
if(DPINFER_DEPS_DIR)
  get_filename_component(_webp_hints "${DPINFER_DEPS_DIR}/webp" ABSOLUTE)
endif()
find_path(DPINFER_WEBP_INCLUDE_DIR webp/mux.h HINTS ${_webp_hints} PATH_SUFFIXES include)
find_library(DPINFER_WEBP_LIBRARY webp HINTS ${_webp_hints} PATH_SUFFIXES lib)
find_library(DPINFER_WEBPMUX_LIBRARY webpmux HINTS ${_webp_hints} PATH_SUFFIXES lib)
if(NOT DPINFER_WEBP_INCLUDE_DIR OR NOT DPINFER_WEBP_LIBRARY OR NOT DPINFER_WEBPMUX_LIBRARY)
  message(FATAL_ERROR "libwebp not found: install libwebp-dev (tools/setup.sh)")
endif()
add_library(dpinfer::webp INTERFACE IMPORTED)
find_package(Threads REQUIRED)
set_target_properties(dpinfer::webp PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${DPINFER_WEBP_INCLUDE_DIR}"
  # mux before the codec it uses; libwebp's static build needs threads and libm.
  INTERFACE_LINK_LIBRARIES "${DPINFER_WEBPMUX_LIBRARY};${DPINFER_WEBP_LIBRARY};Threads::Threads;m")

# libjpeg-turbo (Debian's libjpeg-dev): decodes JPEG input images (io/image_reader.cpp) as Pillow
# does, with the same library. A carried folder (tools/device/prepare_carry.sh) holds its header
# and static library under <dir>/jpeg.
set(_jpeg_hints "")
if(DPINFER_DEPS_DIR)
  get_filename_component(_jpeg_hints "${DPINFER_DEPS_DIR}/jpeg" ABSOLUTE)
endif()
find_path(DPINFER_JPEG_INCLUDE_DIR jpeglib.h HINTS ${_jpeg_hints} PATH_SUFFIXES include)
find_library(DPINFER_JPEG_LIBRARY jpeg HINTS ${_jpeg_hints} PATH_SUFFIXES lib)
if(NOT DPINFER_JPEG_INCLUDE_DIR OR NOT DPINFER_JPEG_LIBRARY)
  message(FATAL_ERROR "libjpeg not found: install libjpeg-dev (tools/setup.sh)")
endif()
add_library(dpinfer::jpeg INTERFACE IMPORTED)
set_target_properties(dpinfer::jpeg PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${DPINFER_JPEG_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES "${DPINFER_JPEG_LIBRARY}")

# SentencePiece (Debian's libsentencepiece-dev): the T5 tokenizer reads spiece.model with
# it. Only dpinfer_pipeline links it, so only with LibTorch; the launcher never does. A
# carried folder (tools/device/prepare_carry.sh) holds it under <dir>/sentencepiece.
if(DPINFER_HAVE_TORCH)
  set(_sp_hints "")
  if(DPINFER_DEPS_DIR)
    get_filename_component(_sp_hints "${DPINFER_DEPS_DIR}/sentencepiece" ABSOLUTE)
  endif()
  find_path(DPINFER_SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h HINTS ${_sp_hints} PATH_SUFFIXES include)
  find_library(DPINFER_SENTENCEPIECE_LIBRARY sentencepiece HINTS ${_sp_hints} PATH_SUFFIXES lib lib/x86_64-linux-gnu)
  if(NOT DPINFER_SENTENCEPIECE_INCLUDE_DIR OR NOT DPINFER_SENTENCEPIECE_LIBRARY)
    message(FATAL_ERROR "SentencePiece not found: install libsentencepiece-dev (tools/setup.sh)")
  endif()
  add_library(dpinfer::sentencepiece UNKNOWN IMPORTED)
  set_target_properties(dpinfer::sentencepiece PROPERTIES IMPORTED_LOCATION "${DPINFER_SENTENCEPIECE_LIBRARY}"
                                                          INTERFACE_INCLUDE_DIRECTORIES "${DPINFER_SENTENCEPIECE_INCLUDE_DIR}")
  message(STATUS "dpinfer: SentencePiece ${DPINFER_SENTENCEPIECE_LIBRARY}")
endif()
