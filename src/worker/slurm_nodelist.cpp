#include "dpinfer/worker/slurm_nodelist.h"

#include <cstdlib>

#include "dpinfer/util/error.h"

namespace dpinfer::worker {
namespace {

[[noreturn]] void bad(const std::string& list, const std::string& why) {
  throw Error("cannot parse SLURM host list '" + list + "': " + why);
}

/// "01-04,07" -> {"01","02","03","04","07"}.
std::vector<std::string> expand_group(const std::string& group, const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= group.size()) {
    size_t comma = group.find(',', start);
    std::string part = group.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t dash = part.find('-');
    std::string lo = part.substr(0, dash), hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    if (lo.empty() || hi.empty() || lo.find_first_not_of("0123456789") != std::string::npos ||
        hi.find_first_not_of("0123456789") != std::string::npos || lo.size() > 9 || hi.size() > 9)
      bad(list, "'[" + group + "]' must hold numbers and ranges such as 01-04,07");
    long a = std::atol(lo.c_str()), b = std::atol(hi.c_str());
    if (b < a) bad(list, "range '" + part + "' goes backwards");
    if (b - a > 1000000) bad(list, "range '" + part + "' is too large");
    size_t width = lo.size();
    for (long v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out.push_back(s);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

/// Expands one host pattern with bracket groups, e.g. "rack[1-2]-n[01-02]".
std::vector<std::string> expand_host(const std::string& host, const std::string& list) {
  std::vector<std::string> results{""};
  size_t i = 0;
  while (i < host.size()) {
    size_t open = host.find('[', i);
    std::string literal = host.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (literal.find(']') != std::string::npos) bad(list, "unbalanced ']'");
    for (auto& r : results) r += literal;
    if (open == std::string::npos) break;
    size_t close = host.find(']', open);
    if (close == std::string::npos) bad(list, "unbalanced '['");
    std::vector<std::string> next;
    for (const auto& r : results)
      for (const auto& n : expand_group(host.substr(open + 1, close - open - 1), list)) next.push_back(r + n);
    results.swap(next);
    i = close + 1;
  }
  return results;
}

}  // namespace

std::vector<std::string> expand_nodelist(const std::string& list) {
  std::vector<std::string> hosts;
  int depth = 0;
  std::string current;
  auto flush = [&] {
    if (current.empty()) bad(list, "empty host name");
    for (auto& h : expand_host(current, list)) hosts.push_back(std::move(h));
    current.clear();
  };
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) bad(list, "unbalanced ']'");
    if (c == ',' && depth == 0) {
      flush();
    } else if (c != ' ') {
      current.push_back(c);
    }
  }
  if (depth != 0) bad(list, "unbalanced '['");
  flush();
  return hosts;
}

int slurm_tasks_on_node(const std::string& spec, int node, const std::string& variable) {
  size_t start = 0;
  int seen = 0;
  while (start < spec.size()) {
    size_t comma = spec.find(',', start);
    std::string part = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int count = std::atoi(part.c_str()), repeat = 1;
    auto x = part.find("(x");
    if (x != std::string::npos) repeat = std::atoi(part.c_str() + x + 2);
    if (count <= 0 || repeat <= 0) throw UsageError(variable + "='" + spec + "' is malformed");
    if (node < seen + repeat) return count;
    seen += repeat;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return 0;
}

}  // namespace dpinfer::worker
