#include "dpinfer/launcher/line_buffer.h"

namespace dpinfer::launcher {

void LineBuffer::feed(std::string_view bytes, const Sink& sink) {
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(bytes);
      while (pending_.size() >= kMaxLine) {
        sink(std::string_view(pending_).substr(0, kMaxLine));
        pending_.erase(0, kMaxLine);
      }
      return;
    }
    if (pending_.empty()) {
      sink(bytes.substr(0, nl));
    } else {
      pending_.append(bytes.substr(0, nl));
      sink(pending_);
      pending_.clear();
    }
    bytes.remove_prefix(nl + 1);
  }
}

void LineBuffer::finish(const Sink& sink) {
  if (pending_.empty()) return;
  sink(pending_);
  pending_.clear();
}

void LineTail::push(std::string_view line) {
  if (capacity_ == 0) return;
  if (lines_.size() == capacity_) lines_.pop_front();
  lines_.emplace_back(line);
}

}  // namespace dpinfer::launcher
