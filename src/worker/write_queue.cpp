#include "dpinfer/worker/write_queue.h"

#include <utility>

#include "dpinfer/util/clock.h"
#include "dpinfer/util/log.h"

namespace dpinfer::worker {
namespace {

/// How often finish() asks `give_up` while it waits for the writer.
constexpr auto kGiveUpPoll = std::chrono::milliseconds(20);

}  // namespace

WriteQueue::WriteQueue(int capacity) : capacity_(capacity) {
  if (capacity_ > 0) thread_ = std::thread([this] { loop(); });
}

WriteQueue::~WriteQueue() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    tasks_.clear();
  }
  wake_writer_.notify_all();
  thread_.join();
}

void WriteQueue::push(std::function<void()> task, int images, int items) {
  if (!thread_.joinable()) {
    // Serial: the task runs here, and its exception goes straight to the caller.
    const auto t0 = std::chrono::steady_clock::now();
    task();
    busy_s_ += seconds_since(t0);
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    const auto has_room = [&] { return error_ || queued_images_ == 0 || queued_images_ + images <= capacity_; };
    if (!has_room() && !told_full_) {
      told_full_ = true;
      log::debug("the write queue is full ({} image(s)): the denoiser waits for the writer", queued_images_);
    }
    const auto t0 = std::chrono::steady_clock::now();
    room_.wait(lock, has_room);
    waited_s_ += seconds_since(t0);
    if (error_) std::rethrow_exception(error_);
    tasks_.push_back({std::move(task), images, items});
    queued_images_ += images;
    queued_items_ += items;
  }
  wake_writer_.notify_one();
}

int64_t WriteQueue::finish(const std::function<bool()>& give_up) {
  if (!thread_.joinable()) return 0;
  int64_t dropped = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (!(error_ || (tasks_.empty() && !running_)) && !give_up()) room_.wait_for(lock, kGiveUpPoll);
    closing_ = true;
    for (const Task& t : tasks_) dropped += t.items;
    tasks_.clear();
  }
  wake_writer_.notify_all();
  thread_.join();  // after the task that runs, if any: a write is not cut short
  return dropped;
}

int64_t WriteQueue::queued_items() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_items_;
}

bool WriteQueue::failed() const { return failed_; }

void WriteQueue::rethrow_if_failed() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

double WriteQueue::busy_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_s_;
}

void WriteQueue::loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_writer_.wait(lock, [&] { return closing_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // closing, and nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
      running_ = true;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::exception_ptr error;
    try {
      task.run();
    } catch (...) {
      error = std::current_exception();
    }
    task.run = nullptr;  // frees the image before the room is given back
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_s_ += seconds_since(t0);
      running_ = false;
      queued_images_ -= task.images;
      queued_items_ -= task.items;
      if (error) {
        // The first error stops the writer: what waits is dropped (never recorded, so
        // the next run makes it), and push() rethrows it to the denoising thread.
        error_ = error;
        failed_ = true;
        tasks_.clear();
        queued_images_ = 0;
        queued_items_ = 0;
      }
    }
    room_.notify_all();
    if (error) return;
  }
}

}  // namespace dpinfer::worker
