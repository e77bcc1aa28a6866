#pragma once
// Facts about this host that the launcher resolves at start: free ports, device counts.

#include <string>

namespace dpinfer::launcher {

/// A TCP port that was free a moment ago (bound to port 0, then released). Like
/// torchrun's single-node default, another process can still take it before the
/// workers' store binds it; the window is milliseconds.
int pick_free_port();

/// Throws Error naming `port` when something already listens on it on this host.
void check_port_available(int port);

/// CUDA devices visible to a process started now, honouring CUDA_VISIBLE_DEVICES.
/// Asks the driver (libcuda.so.1, loaded at run time) in a short-lived child
/// process, so that the launcher itself never holds CUDA state. 0 without a driver.
int count_cuda_devices();

/// CPUs this process may run on (its affinity mask), as SLURM and cgroups restrict it.
int count_usable_cpus();

/// Resolves a command name like execvp() would: a name with '/' is taken as is,
/// otherwise each PATH entry is tried. Throws Error with the status to exit with
/// (127 not found, 126 not executable) as in a shell.
std::string resolve_command(const std::string& name);

}  // namespace dpinfer::launcher
