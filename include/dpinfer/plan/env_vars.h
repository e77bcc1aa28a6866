#pragma once
// Reading integers from an environment map (torchrun's, SLURM's, OpenMPI's
// variables), with one clear message naming the variable when a value is bad.

#include <map>
#include <string>

namespace dpinfer::plan {

using EnvVars = std::map<std::string, std::string>;

/// The value of `key`, or nullptr when it is unset.
const std::string* find_env(const EnvVars& env, const std::string& key);

/// `key` as a whole decimal integer in [min, max]. Throws UsageError naming the
/// variable when it is unset, not an integer, or out of range.
long long env_int(const EnvVars& env, const std::string& key, long long min, long long max);

/// env_int(), or `fallback` when `key` is unset.
long long env_int_or(const EnvVars& env, const std::string& key, long long fallback, long long min, long long max);

}  // namespace dpinfer::plan
