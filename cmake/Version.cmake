# The version string: "<project version>+g<git describe --tags --always --dirty>" in a git
# checkout, else the project version. It is worked out when the build runs, not when CMake
# configures: it goes into every image's record (dpinfer_version) and run.json, so a build
# after `git pull` or an edit must not keep the commit of the first configure.
#
# Included from CMakeLists.txt, this file defines the target dpinfer_version_string, which
# runs this same file in script mode (cmake -P) on every build. That writes
# <build>/generated/dpinfer/util/version_string.h only when the string changed, so an unchanged
# checkout recompiles nothing and a new commit recompiles src/util/version.cpp alone.

# The version string of the checkout at `source_dir`, into `out_var`.
function(dpinfer_describe_version source_dir project_version git out_var)
  set(version "${project_version}")
  if(git AND EXISTS "${source_dir}/.git")  # .git is a file in a worktree
    execute_process(COMMAND "${git}" describe --tags --always --dirty
                    WORKING_DIRECTORY "${source_dir}"
                    OUTPUT_VARIABLE described OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                    RESULT_VARIABLE rc)
    if(rc EQUAL 0 AND described)
      set(version "${project_version}+g${described}")
    endif()
  endif()
  set(${out_var} "${version}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  # cmake -DSOURCE_DIR=... -DPROJECT_VERSION=... -DGIT_EXECUTABLE=... -DOUT=... -P Version.cmake
  dpinfer_describe_version("${SOURCE_DIR}" "${PROJECT_VERSION}" "${GIT_EXECUTABLE}" version)
  set(text "// Written by cmake/Version.cmake on each build: not a source file.\n"
           "#define DPINFER_VERSION \"${version}\"\n")
  string(CONCAT text ${text})
  set(old "")
  if(EXISTS "${OUT}")
    file(READ "${OUT}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${OUT}" "${text}")
  endif()
  return()
endif()

find_package(Git QUIET)
dpinfer_describe_version("${PROJECT_SOURCE_DIR}" "${PROJECT_VERSION}" "${GIT_EXECUTABLE}" DPINFER_VERSION_STRING)
set(DPINFER_VERSION_DIR ${PROJECT_BINARY_DIR}/generated)
add_custom_target(dpinfer_version_string
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DPROJECT_VERSION=${PROJECT_VERSION}
          -DGIT_EXECUTABLE=${GIT_EXECUTABLE} -DOUT=${DPINFER_VERSION_DIR}/dpinfer/util/version_string.h
          -P ${CMAKE_CURRENT_LIST_FILE}
  BYPRODUCTS ${DPINFER_VERSION_DIR}/dpinfer/util/version_string.h
  COMMENT "Checking the version string (git describe)"
  VERBATIM)
