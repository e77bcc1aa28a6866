# Unity ("jumbo") builds of dpinfer's own targets (issue 25). A LibTorch file spends most of its
# compile time instantiating and generating code for LibTorch's, gtest's, fmt's and JSON's
# inline templates (g++ -ftime-report on a torch test: 41% template instantiation, 54% code
# generation; parsing is cheap once the PCH is in), and every file repeats that work for the
# same templates. CMake's unity build compiles the sources of a target in batches, one
# translation unit per batch, so each batch instantiates them once. Measured back to back on the
# 2-core machine: 8 nn/ files took 48 s of CPU one by one and 8.4 s as one batch; 8 scheduler and
# nn files 64 s and 11 s (docs/building.md has the whole build's figures).
#
# What it asks of the code: names in a file's anonymous namespace are unique across its target,
# since a batch is one translation unit (a clash is a redefinition error, never a silent
# change, as long as no two files define overloads of one name; give file-local helpers names
# that say whose they are). A file with source-level compile options (-ffp-contract=off) is kept
# out of the batches by CMake itself.
#
# The price is an edit's rebuild: touching one file recompiles its batch (up to
# DPINFER_UNITY_BATCH files). Iterating on one file, configure with -DDPINFER_UNITY=OFF.
option(DPINFER_UNITY "dpinfer: compile each target's sources in batches (unity build)" ON)
set(DPINFER_UNITY_BATCH 8 CACHE STRING "dpinfer: sources per unity batch")
set(CMAKE_UNITY_BUILD ${DPINFER_UNITY})
set(CMAKE_UNITY_BUILD_BATCH_SIZE ${DPINFER_UNITY_BATCH})
# A test file keeps its helpers and tests in `namespace { namespace DPINFER_UNITY_ID {`: CMake
# defines DPINFER_UNITY_ID to a name unique to each file of a batch (in a build without batches it
# stays the literal name, inside the anonymous namespace all the same).
set(CMAKE_UNITY_BUILD_UNIQUE_ID DPINFER_UNITY_ID)
