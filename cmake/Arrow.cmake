# Arrow and Parquet C++ from the PyPI pyarrow wheel (pinned in tools/readers-requirements.txt,
# installed by tools/setup.sh), as LibTorch comes from the torch wheel: Debian 12 has no
# libarrow-dev. Used by one small shared module, dpinfer_parquet (src/io/parquet/), which
# io/parquet.cpp loads with dlopen on first use: the launcher `dpinfer` never links libarrow
# (docs/outputs-and-resume.md, Parquet).
#
# Found through -DDPINFER_ARROW_INCLUDE_DIR and -DDPINFER_ARROW_LIBRARY_DIR, or else by asking
# the project's venv (DPINFER_VENV overrides where it is), or else python3 on PATH, for
# pyarrow.get_include() and pyarrow.get_library_dirs(). Sets:
#   DPINFER_HAVE_PARQUET   ON when the wheel's headers and libarrow/libparquet were found
set(DPINFER_WITH_PARQUET AUTO CACHE STRING
    "dpinfer: build the parquet module (pyarrow's Arrow C++): ON, OFF or AUTO (when pyarrow is found)")
set_property(CACHE DPINFER_WITH_PARQUET PROPERTY STRINGS AUTO ON OFF)
set(DPINFER_ARROW_INCLUDE_DIR "" CACHE PATH "dpinfer: pyarrow's include folder (else asked of the venv's pyarrow)")
set(DPINFER_ARROW_LIBRARY_DIR "" CACHE PATH "dpinfer: the folder of libarrow.so.* and libparquet.so.* (else the venv's pyarrow)")
set(DPINFER_HAVE_PARQUET OFF)
if(DPINFER_WITH_PARQUET STREQUAL "OFF")
  return()
endif()

set(_arrow_include "${DPINFER_ARROW_INCLUDE_DIR}")
set(_arrow_libdir "${DPINFER_ARROW_LIBRARY_DIR}")
set(_arrow_why "")
if(NOT _arrow_include OR NOT _arrow_libdir)
  if(NOT "$ENV{DPINFER_VENV}" STREQUAL "")
    set(_arrow_py "$ENV{DPINFER_VENV}/bin/python")
  else()
    set(_arrow_py "${PROJECT_SOURCE_DIR}/.venv/bin/python")
  endif()
  if(NOT EXISTS "${_arrow_py}")
    find_program(DPINFER_ARROW_PYTHON NAMES python3)
    set(_arrow_py "${DPINFER_ARROW_PYTHON}")
  endif()
  if(_arrow_py)
    execute_process(
      COMMAND "${_arrow_py}" -c "import pyarrow; print(pyarrow.get_include()); print(pyarrow.get_library_dirs()[0]); print(pyarrow.__version__)"
      OUTPUT_VARIABLE _arrow_out OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_VARIABLE _arrow_err RESULT_VARIABLE _rc)
    if(_rc EQUAL 0)
      string(REPLACE "\n" ";" _arrow_out "${_arrow_out}")
      list(GET _arrow_out 0 _arrow_include)
      list(GET _arrow_out 1 _arrow_libdir)
      list(GET _arrow_out 2 _arrow_version)
    else()
      string(REGEX REPLACE ".*\n([^\n]+)\n*$" "\\1" _arrow_why "${_arrow_py} cannot import pyarrow: ${_arrow_err}")
    endif()
  else()
    set(_arrow_why "no python3 to ask for pyarrow")
  endif()
endif()

set(_arrow_lib "")
set(_parquet_lib "")
if(_arrow_libdir)
  # The wheel ships only the versioned names (libarrow.so.2600), which find_library does not take.
  file(GLOB _arrow_lib "${_arrow_libdir}/libarrow.so.[0-9]*")
  file(GLOB _parquet_lib "${_arrow_libdir}/libparquet.so.[0-9]*")
  list(FILTER _arrow_lib EXCLUDE REGEX "\\.so\\.[0-9]+\\.")
  list(FILTER _parquet_lib EXCLUDE REGEX "\\.so\\.[0-9]+\\.")
endif()
if(NOT _arrow_include OR NOT EXISTS "${_arrow_include}/parquet/arrow/writer.h" OR NOT _arrow_lib OR NOT _parquet_lib)
  if(NOT _arrow_why)
    set(_arrow_why "no arrow/parquet headers or libraries in '${_arrow_include}', '${_arrow_libdir}'")
  endif()
  if(DPINFER_WITH_PARQUET STREQUAL "ON")
    message(FATAL_ERROR "dpinfer: parquet: ${_arrow_why}\nRun tools/setup.sh (it installs pyarrow into .venv), "
                        "or configure with -DDPINFER_WITH_PARQUET=OFF to build without parquet input and indexes.")
  endif()
  message(STATUS "dpinfer: parquet: not built (${_arrow_why}); tools/setup.sh installs pyarrow")
  return()
endif()
set(DPINFER_HAVE_PARQUET ON)
add_library(dpinfer_arrow INTERFACE)
target_include_directories(dpinfer_arrow SYSTEM INTERFACE "${_arrow_include}")
target_link_libraries(dpinfer_arrow INTERFACE "${_parquet_lib}" "${_arrow_lib}")
add_library(dpinfer::arrow ALIAS dpinfer_arrow)
set(DPINFER_ARROW_RPATH "${_arrow_libdir}")
if(NOT _arrow_version)
  set(_arrow_version "(given folders)")
endif()
message(STATUS "dpinfer: parquet from pyarrow ${_arrow_version}: ${_arrow_libdir}")
