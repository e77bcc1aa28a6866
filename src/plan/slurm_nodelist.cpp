#include "dpinfer/plan/slurm_nodelist.h"

#include <algorithm>
#include <cstdlib>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::plan {
namespace {

[[noreturn]] void bad(const std::string& list, const std::string& why) {
  throw Error("cannot parse SLURM host list " + quote(list, 100) + ": " + why);
}

/// One range of a bracket group: "08-10" is {8, 10, width 2}; "7" is {7, 7, width 1}.
struct Range {
  long lo = 0, hi = 0;
  size_t width = 0;  ///< digits of the low bound: zero padding is kept ("n[08-10]" gives n08 n09 n10)
  std::string at(long v) const {
    std::string s = std::to_string(v);
    if (s.size() < width) s.insert(0, width - s.size(), '0');
    return s;
  }
};

/// A host pattern such as "rack[1-2]-n[01-02]": literals[0], group 0, literals[1],
/// group 1, ..., one more literal than groups.
struct Pattern {
  std::vector<std::string> literals;
  std::vector<std::vector<Range>> groups;
};

/// "01-04,07" -> {01-04 width 2, 7-7 width 2}, checked but not enumerated.
std::vector<Range> parse_group(const std::string& group, const std::string& list) {
  std::vector<Range> out;
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
    if (b < a) bad(list, "range " + quote(part, 60) + " goes backwards");
    if (b - a > 1000000) bad(list, "range " + quote(part, 60) + " is too large");
    out.push_back({a, b, lo.size()});
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Pattern parse_host(const std::string& host, const std::string& list) {
  Pattern p;
  size_t i = 0;
  while (true) {
    size_t open = host.find('[', i);
    std::string literal = host.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (literal.find(']') != std::string::npos) bad(list, "unbalanced ']'");
    p.literals.push_back(literal);
    if (open == std::string::npos) break;
    size_t close = host.find(']', open);
    if (close == std::string::npos) bad(list, "unbalanced '['");
    p.groups.push_back(parse_group(host.substr(open + 1, close - open - 1), list));
    i = close + 1;
  }
  return p;
}

/// The host patterns of a list, split at the commas outside brackets, all checked.
std::vector<Pattern> parse_list(const std::string& list) {
  std::vector<Pattern> out;
  int depth = 0;
  std::string current;
  auto flush = [&] {
    if (current.empty()) bad(list, "empty host name");
    out.push_back(parse_host(current, list));
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
  return out;
}

/// Appends the hosts of `p` (the cross product of its groups, in order) to `out`.
void expand_pattern(const Pattern& p, size_t g, const std::string& prefix, std::vector<std::string>& out) {
  std::string head = prefix + p.literals[g];
  if (g == p.groups.size()) {
    out.push_back(std::move(head));
    return;
  }
  for (const Range& r : p.groups[g])
    for (long v = r.lo; v <= r.hi; ++v) expand_pattern(p, g + 1, head + r.at(v), out);
}

}  // namespace

std::vector<std::string> expand_nodelist(const std::string& list) {
  const std::vector<Pattern> patterns = parse_list(list);
  // Count first, saturating past the cap: bracket groups multiply ("a[0-999999]b[0-999]"
  // is 10^9 names), and building them all took tens of seconds and gigabytes.
  size_t total = 0;
  for (const Pattern& p : patterns) {
    size_t n = 1;
    for (const auto& group : p.groups) {
      size_t size = 0;
      for (const Range& r : group) size += static_cast<size_t>(r.hi - r.lo + 1);
      n = size > kMaxNodelistHosts ? kMaxNodelistHosts + 1 : std::min(n * size, kMaxNodelistHosts + 1);
    }
    total = std::min(total + n, kMaxNodelistHosts + 1);
  }
  if (total > kMaxNodelistHosts)
    bad(list, "it names more than " + std::to_string(kMaxNodelistHosts) +
                  " hosts; check the variable, or set MASTER_ADDR to rank 0's host");
  std::vector<std::string> hosts;
  hosts.reserve(total);
  for (const Pattern& p : patterns) expand_pattern(p, 0, "", hosts);
  return hosts;
}

std::string first_host(const std::string& list) {
  // The whole list is checked (the same errors as expand_nodelist), but only the
  // first pattern's first name is built: the first number of each group.
  const Pattern p = parse_list(list).front();
  std::string host = p.literals[0];
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const Range& r = p.groups[g].front();
    host += r.at(r.lo) + p.literals[g + 1];
  }
  return host;
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
    if (count <= 0 || repeat <= 0) throw UsageError(variable + "=" + quote(spec, 60) + " is malformed");
    if (node < seen + repeat) return count;
    seen += repeat;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return 0;
}

}  // namespace dpinfer::plan
