# Third-party packages. All come from find_package (Debian's -dev packages, see
# tools/setup.sh); nothing is downloaded at configure time.
#
# -DDPINFER_DEPS_DIR=<dir> takes them from a carried folder instead, for a machine
# without these packages (the lent GPU machine): see cmake/CarriedDeps.cmake.
set(DPINFER_DEPS_DIR "" CACHE PATH "dpinfer: a folder of carried headers and sources to use instead of the system packages")
find_package(Threads REQUIRED)
# OpenSSL's libcrypto: SHA-256 for the infotext's Model hash and Lora hashes (worker/model_hashes.cpp).
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
