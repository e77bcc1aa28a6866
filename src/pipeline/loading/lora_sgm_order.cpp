// Ref: diffusers 0.36 loaders/lora_conversion_utils.py _maybe_map_sgm_blocks_to_diffusers; CPython 3.11
// Objects/setobject.c (set_add_entry, set_insert_clean, set_table_resize) for the order its block-number sets
// iterate in.
#include "dpinfer/pipeline/loading/lora_sgm_order.h"

#include <array>
#include <map>
#include <optional>
#include <utility>

namespace dpinfer::pipeline {
namespace {

constexpr size_t kMinSize = 8;        // PySet_MINSIZE
constexpr size_t kLinearProbes = 9;   // LINEAR_PROBES
constexpr size_t kPerturbShift = 5;   // PERTURB_SHIFT

using Table = std::vector<std::optional<int64_t>>;

/// set_add_entry's and set_insert_clean's probe sequence for `key` in `table`: the first slot that is empty
/// or holds `key`.
size_t probe(const Table& table, int64_t key) {
  const size_t mask = table.size() - 1;
  size_t perturb = static_cast<size_t>(key);
  size_t i = static_cast<size_t>(key) & mask;
  while (true) {
    // `i` and, where they fit before the table's end, the LINEAR_PROBES slots after it.
    const size_t probes = i + kLinearProbes <= mask ? kLinearProbes : 0;
    for (size_t j = 0; j <= probes; ++j)
      if (!table[i + j] || *table[i + j] == key) return i + j;
    perturb >>= kPerturbShift;
    i = (i * 5 + 1 + perturb) & mask;
  }
}

/// The original-block kind of a key and its block number: the fifth '_' field, as
/// int(key.split("_")[:5][-1]) reads it.
struct SgmBlock {
  int kind = -1;  ///< 0 input_blocks, 1 middle_block, 2 output_blocks; -1 where diffusers raises
  int64_t id = 0;
};

SgmBlock block_of(const std::string& key) {
  static const std::array<const char*, 3> kKinds = {"input_blocks", "middle_block", "output_blocks"};
  std::vector<std::string> fields(1);
  for (char c : key) {
    if (c == '_') {
      if (fields.size() == 5) break;
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  SgmBlock b;
  const std::string& id = fields.back();
  if (id.empty() || id.size() > 6 || id.find_first_not_of("0123456789") != std::string::npos) return b;
  for (int k = 0; k < 3 && b.kind < 0; ++k)
    if (key.find(kKinds[k]) != std::string::npos) b.kind = k;  // the first pattern the key holds
  b.id = std::stoll(id);
  return b;
}

bool holds_any(const std::string& key, std::initializer_list<const char*> pieces) {
  for (const char* p : pieces)
    if (key.find(p) != std::string::npos) return true;
  return false;
}

bool in_original_names(const std::string& key) { return holds_any(key, {"input_blocks", "middle_block", "output_blocks"}); }

/// Step 1 of the function: whether some key is in the original block names, and whether some other is in
/// diffusers' (a key with both counts as the former).
std::pair<bool, bool> block_names(const std::vector<std::string>& keys) {
  bool sgm = false, diffusers_names = false;
  for (const std::string& k : keys) {
    if (in_original_names(k)) sgm = true;
    else if (holds_any(k, {"down_blocks", "mid_block", "up_blocks"})) diffusers_names = true;
  }
  return {sgm, diffusers_names};
}

}  // namespace

std::vector<int64_t> python_int_set_order(const std::vector<int64_t>& added) {
  Table table(kMinSize);
  size_t used = 0;  // no key is ever removed, so CPython's fill == used
  for (int64_t key : added) {
    const size_t slot = probe(table, key);
    if (table[slot]) continue;  // already there
    table[slot] = key;
    ++used;
    const size_t mask = table.size() - 1;
    if (used * 5 < mask * 3) continue;
    // set_table_resize(so, used > 50000 ? used * 2 : used * 4): the smallest power of two above that,
    // the old slots re-inserted in order.
    const size_t min_used = used > 50000 ? used * 2 : used * 4;
    size_t size = kMinSize;
    while (size <= min_used) size <<= 1;
    Table bigger(size);
    for (const std::optional<int64_t>& k : table)
      if (k) bigger[probe(bigger, *k)] = *k;
    table = std::move(bigger);
  }
  std::vector<int64_t> order;
  for (const std::optional<int64_t>& k : table)
    if (k) order.push_back(*k);
  return order;
}

std::vector<std::string> sgm_keys_dropped(const std::vector<std::string>& keys) {
  const auto [sgm, diffusers_names] = block_names(keys);
  std::vector<std::string> dropped;
  if (sgm && diffusers_names)
    for (const std::string& k : keys)
      if (in_original_names(k)) dropped.push_back(k);
  return dropped;
}

std::vector<std::string> sgm_mapped_key_order(const std::vector<std::string>& keys) {
  const auto [sgm, diffusers_names] = block_names(keys);
  if (!sgm || diffusers_names) return {};
  std::vector<std::string> order, failing;
  std::array<std::vector<int64_t>, 3> ids;  // per kind, in the order the keys add them to the set
  std::map<std::pair<int, int64_t>, std::vector<std::string>> members;  // (kind, block) -> its keys, in order
  for (const std::string& key : keys) {
    if (key.find("text") != std::string::npos) {
      order.push_back(key);  // the text encoders' keys come first
      continue;
    }
    const SgmBlock b = block_of(key);
    if (b.kind < 0) {
      failing.push_back(key);
      continue;
    }
    ids[b.kind].push_back(b.id);
    members[{b.kind, b.id}].push_back(key);
  }
  // Each block's keys in the file's order. (diffusers collects them by substring, f"input_blocks_{i}" in key,
  // so block 1 also claims blocks 10-19's keys and the function then fails with a KeyError: a UNet of more
  // than three down blocks, which SDXL does not have.)
  for (int kind = 0; kind < 3; ++kind)
    for (int64_t id : python_int_set_order(ids[kind])) {
      const std::vector<std::string>& block = members.at({kind, id});
      order.insert(order.end(), block.begin(), block.end());
    }
  order.insert(order.end(), failing.begin(), failing.end());
  return order;
}

}  // namespace dpinfer::pipeline
