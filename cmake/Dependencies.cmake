# Third-party packages. All come from find_package (Debian's -dev packages, see
# tools/setup.sh); nothing is downloaded at configure time.
find_package(Threads REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
if(DPINFER_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  find_package(PNG REQUIRED)  # libpng: the tests' independent PNG reader
endif()

include(Torch)
