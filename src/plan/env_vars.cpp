#include "dpinfer/plan/env_vars.h"

#include <cerrno>
#include <cstdlib>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::plan {

const std::string* find_env(const EnvVars& env, const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

long long env_int(const EnvVars& env, const std::string& key, long long min, long long max) {
  const std::string* v = find_env(env, key);
  if (!v) throw UsageError("environment variable " + key + " is not set but the rank environment needs it");
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno != 0 || x < min || x > max)
    throw UsageError("environment variable " + key + "=" + quote(*v, 60) + " is not an integer in " + std::to_string(min) +
                     ".." + std::to_string(max));
  return x;
}

long long env_int_or(const EnvVars& env, const std::string& key, long long fallback, long long min, long long max) {
  return find_env(env, key) ? env_int(env, key, min, max) : fallback;
}

}  // namespace dpinfer::plan
