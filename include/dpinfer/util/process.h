#pragma once
// Facts about the running process: its environment and where its executable lives.

#include <map>
#include <string>

namespace dpinfer {

using EnvMap = std::map<std::string, std::string>;

/// The process's own environment as a map.
EnvMap current_environment();

/// The value of environment variable `name`, or "" when it is unset.
std::string getenv_or_empty(const char* name);

/// The directory holding the running executable (/proc/self/exe). Throws SystemError.
std::string self_exe_dir();

}  // namespace dpinfer
