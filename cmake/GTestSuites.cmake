# dpinfer_add_gtest_suites(TARGET LABELS <labels> [QUICK_LABEL <label>] [ENVIRONMENT <VAR=value>...]
# TIMEOUT <s>): registers the gtest binary TARGET
# with CTest one test *suite* per process, rather than gtest_discover_tests' one test per process.
#
# Why (issue 25): a LibTorch test binary takes about half a second to start (it maps libtorch_cpu
# and libtorch_cuda and their CUDA libraries), which was most of the time of its ~370 short
# tests; run by suite, it starts ~60 times instead. A value-parameterized suite
# ("Fixtures/PipelineParity") still runs each instance in a process of its own: each is a whole
# fixture pipeline, long enough to schedule alone, and `ctest -R tiny_sdxl` still finds one.
# The plain suites (a component each: a tokenizer, a model, the weight loader) also get
# QUICK_LABEL, for the edit-build-test loop (`ctest --preset quick`).
#
# As gtest_discover_tests does, the list comes from `TARGET --gtest_list_tests` after each build
# (cmake/GTestSuitesDiscovery.cmake writes the CTest file that the directory includes). A test
# named Suite runs `--gtest_filter=Suite.*`; one whose filter runs no test fails. The *_CUDA tests
# are not listed where no GPU is (tests/torch/torch_main.cpp filters them), as before.
function(dpinfer_add_gtest_suites target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TIMEOUT;QUICK_LABEL" "LABELS;ENVIRONMENT")
  string(REPLACE ";" "|" environment "${arg_ENVIRONMENT}")
  set(ctest_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D "EXECUTABLE=$<TARGET_FILE:${target}>" -D "CTEST_FILE=${ctest_file}"
            -D "LABELS=${arg_LABELS}" -D "QUICK_LABEL=${arg_QUICK_LABEL}" -D "TIMEOUT=${arg_TIMEOUT}"
            -D "ENVIRONMENT=${environment}"
            -P ${PROJECT_SOURCE_DIR}/cmake/GTestSuitesDiscovery.cmake
    BYPRODUCTS ${ctest_file}
    VERBATIM)
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${ctest_file})
endfunction()
