# The version string: `git describe` in a checkout, else the project version.
# It is compiled into src/util/version.cpp alone (see src/CMakeLists.txt).
set(DPINFER_VERSION_STRING ${PROJECT_VERSION})
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS ${PROJECT_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --tags --always --dirty
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE _describe OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                  RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _describe)
    set(DPINFER_VERSION_STRING "${PROJECT_VERSION}+g${_describe}")
  endif()
endif()
