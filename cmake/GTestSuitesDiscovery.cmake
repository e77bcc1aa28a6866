# Run by dpinfer_add_gtest_suites (cmake/GTestSuites.cmake) after each build of a gtest binary:
# lists its tests and writes CTEST_FILE, one add_test() per plain suite and per instance of a
# value-parameterized one. Inputs: EXECUTABLE, CTEST_FILE, LABELS (a ;-list), QUICK_LABEL (added
# to the plain suites' labels; may be empty), ENVIRONMENT (VAR=value|VAR=value, may be empty), TIMEOUT.
execute_process(COMMAND "${EXECUTABLE}" --gtest_list_tests OUTPUT_VARIABLE listing RESULT_VARIABLE rc
                ERROR_VARIABLE errors TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests failed (${rc}): ${errors}")
endif()
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(script "# Written by cmake/GTestSuitesDiscovery.cmake from ${EXECUTABLE} --gtest_list_tests\n")
set(suite "")
set(plain_labels ${LABELS} ${QUICK_LABEL})
string(REPLACE "|" ";" ENVIRONMENT "${ENVIRONMENT}")
macro(add_one name filter labels)
  string(APPEND script "add_test([==[${name}]==] [==[${EXECUTABLE}]==] [==[--gtest_filter=${filter}]==])\n")
  # A filter that runs no test is a mistake here (the list came from the binary): fail it.
  string(APPEND script "set_tests_properties([==[${name}]==] PROPERTIES LABELS [==[${labels}]==] TIMEOUT ${TIMEOUT}"
                       " FAIL_REGULAR_EXPRESSION [==[ 0 tests from 0 test suites ran]==]"
                       " ENVIRONMENT [==[${ENVIRONMENT}]==])\n")
endmacro()
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.[ ]*(#.*)?$")
    # "Suite." or "Prefix/Suite." (a value-parameterized instantiation), maybe "  # TypeParam = ..."
    set(suite "${CMAKE_MATCH_1}")
    if(NOT suite MATCHES "/")
      add_one("${suite}" "${suite}.*" "${plain_labels}")
    endif()
  elseif(suite MATCHES "/" AND line MATCHES "^  ([^ ]+)")  # MATCHES sets CMAKE_MATCH_1: the line's last
    add_one("${suite}.${CMAKE_MATCH_1}" "${suite}.${CMAKE_MATCH_1}" "${LABELS}")
  endif()
endforeach()
file(WRITE "${CTEST_FILE}" "${script}")
