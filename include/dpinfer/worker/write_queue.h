#pragma once
// The worker's writer thread: it runs a rank's output work (PNG encoding, fsync,
// rename, then the manifest record; failure records; progress) in order, while the
// next batch denoises. The queue is bounded in images, so memory stays flat: a full
// queue makes the denoising thread wait.
//
// Every task runs on the one writer thread, in the order it was pushed, so the
// manifest gets its records in the order the serial loop gave them, and what the
// tasks touch (the manifest, the rank's counts, the progress pipe) has one writer.
// With capacity 0 there is no thread: push() runs each task at once, in the caller
// (the serial loop of before, `--write-queue 0`).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace dpinfer::worker {

class WriteQueue {
 public:
  /// `capacity` images may wait for the writer thread; 0: no thread, tasks run in push().
  explicit WriteQueue(int capacity);
  /// Drops the tasks that wait (a run that ends by an exception), lets the one running
  /// finish, and joins the thread.
  ~WriteQueue();
  WriteQueue(const WriteQueue&) = delete;
  WriteQueue& operator=(const WriteQueue&) = delete;

  /// Queues `task`, which holds `images` images (0 for a record without one; such a
  /// task never waits) and records `items` items (0 for a count only). Waits while
  /// the queue holds `capacity` images already, unless it is empty (a batch larger
  /// than the queue still goes, one image at a time). Rethrows a task's exception,
  /// if one threw: the writer runs no task after it.
  void push(std::function<void()> task, int images, int items);

  /// Waits until every task has run or `give_up()` (polled) returns true; then drops
  /// what still waits and joins the thread. Returns how many items the dropped tasks
  /// would have recorded. Does not throw a task's exception: rethrow_if_failed() does.
  int64_t finish(const std::function<bool()>& give_up);

  /// The items of the tasks that wait or run.
  int64_t queued_items() const;

  /// True once a task has thrown (cheap, any thread: the pipeline's cancel check asks).
  bool failed() const;
  /// Rethrows the exception the first failed task threw, if any.
  void rethrow_if_failed();

  /// Seconds push() spent waiting for room: the denoiser idle for want of a writer.
  double waited_s() const { return waited_s_; }
  /// Seconds the writer thread (or push(), with no thread) spent running tasks.
  double busy_s() const;
  int capacity() const { return capacity_; }

 private:
  struct Task {
    std::function<void()> run;
    int images = 0;
    int items = 0;
  };
  void loop();  ///< the writer thread

  const int capacity_;
  mutable std::mutex mu_;
  std::condition_variable wake_writer_, room_;
  std::deque<Task> tasks_;
  int queued_images_ = 0;
  bool running_ = false;  ///< a task is running on the writer thread
  int64_t queued_items_ = 0;  ///< of the tasks that wait or run
  bool told_full_ = false;    ///< the first wait for room is logged (-v)
  bool closing_ = false;  ///< finish() or the destructor: no more tasks come
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
  double waited_s_ = 0;
  double busy_s_ = 0;
  std::thread thread_;
};

}  // namespace dpinfer::worker
