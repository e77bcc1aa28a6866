#pragma once
// SLURM's compressed host lists, e.g. "gpu[01-04,07],cpu-a[1-2]".

#include <string>
#include <vector>

namespace dpinfer::worker {

/// Expands a SLURM host list: comma-separated names, each with any number of
/// bracket groups of numbers and ranges; zero-padding of a range's bounds is kept
/// ("n[08-10]" gives n08 n09 n10). Throws Error on malformed input.
std::vector<std::string> expand_nodelist(const std::string& list);

}  // namespace dpinfer::worker
