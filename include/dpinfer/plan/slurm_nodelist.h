#pragma once
// SLURM's compressed lists: host lists such as "gpu[01-04,07],cpu-a[1-2]" and
// per-node task counts such as "2(x3),1".

#include <cstddef>
#include <string>
#include <vector>

namespace dpinfer::plan {

/// Expands a SLURM host list: comma-separated names, each with any number of
/// bracket groups of numbers and ranges; zero-padding of a range's bounds is kept
/// ("n[08-10]" gives n08 n09 n10). Throws Error on malformed input, and on a list
/// that names more than kMaxNodelistHosts hosts.
std::vector<std::string> expand_nodelist(const std::string& list);

/// The most hosts expand_nodelist() builds: bracket groups multiply, and no cluster
/// has a million nodes.
constexpr size_t kMaxNodelistHosts = size_t{1} << 20;

/// expand_nodelist(list).front() without building the rest: the first number of each
/// bracket group (rank 0's host is all a worker needs). Checks the whole list and
/// throws the same errors, except that there is no cap on the host count.
std::string first_host(const std::string& list);

/// Entry `node` of a per-node task count list such as SLURM_STEP_TASKS_PER_NODE's
/// "2(x3),1" (= 2,2,2,1); 0 when `node` is past its end. Throws UsageError naming
/// `variable` when the list is malformed.
int slurm_tasks_on_node(const std::string& spec, int node, const std::string& variable = "SLURM_STEP_TASKS_PER_NODE");

}  // namespace dpinfer::plan
