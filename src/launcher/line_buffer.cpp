#include "dpinfer/launcher/line_buffer.h"

namespace dpinfer::launcher {

void LineBuffer::feed(std::string_view bytes, const Sink& sink) {
  while (!bytes.empty()) {
    if (after_cr_ != kNoCr && bytes.front() == '\n') {
      // "\r\n", split across reads or not, is one line end: a blank line when its "\r" ended nothing.
      if (after_cr_ == kCrEndedNothing) sink(std::string_view());
      bytes.remove_prefix(1);
      after_cr_ = kNoCr;
      continue;
    }
    after_cr_ = kNoCr;
    size_t end = bytes.find_first_of("\r\n");
    if (end == std::string_view::npos) {
      pending_.append(bytes);
      while (pending_.size() >= kMaxLine) {
        sink(std::string_view(pending_).substr(0, kMaxLine));
        pending_.erase(0, kMaxLine);
      }
      return;
    }
    const bool cr = bytes[end] == '\r';
    const bool ends_nothing = pending_.empty() && end == 0;
    if (pending_.empty()) {
      if (!cr || !ends_nothing) sink(bytes.substr(0, end));
    } else {
      pending_.append(bytes.substr(0, end));
      emit(sink);
    }
    if (cr) after_cr_ = ends_nothing ? kCrEndedNothing : kCrEndedALine;
    bytes.remove_prefix(end + 1);
  }
}

void LineBuffer::emit(const Sink& sink) {
  sink(pending_);
  pending_.clear();
}

void LineBuffer::finish(const Sink& sink) {
  after_cr_ = kNoCr;
  if (pending_.empty()) return;
  emit(sink);
}

void LineTail::push(std::string_view line) {
  if (capacity_ == 0) return;
  if (lines_.size() == capacity_) lines_.pop_front();
  lines_.emplace_back(line);
}

}  // namespace dpinfer::launcher
