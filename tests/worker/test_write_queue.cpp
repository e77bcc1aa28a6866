// WriteQueue (worker/write_queue.h), the worker's writer thread, alone: order, the
// bound, errors, and the drain that a stop signal cuts short. In dpinfer_torch_tests
// because dpinfer_worker links LibTorch; the queue itself uses none.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "dpinfer/util/error.h"
#include "dpinfer/worker/write_queue.h"

using dpinfer::worker::WriteQueue;
using namespace std::chrono_literals;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

/// A gate that tasks wait at until the test opens it.
class Gate {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void pass() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};


TEST(WriteQueue, RunsTheTasksInOrderOnItsOwnThread) {
  WriteQueue q(4);
  std::vector<int> order;  // only the writer thread appends
  std::atomic<bool> other_thread{true};
  const auto me = std::this_thread::get_id();
  for (int i = 0; i < 50; ++i)
    q.push([&, i] {
      order.push_back(i);
      if (std::this_thread::get_id() == me) other_thread = false;
    }, i % 3 == 0 ? 0 : 1, 1);
  EXPECT_EQ(q.finish([] { return false; }), 0);
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_TRUE(other_thread);
  q.rethrow_if_failed();
}

TEST(WriteQueue, APushWaitsWhileTheQueueHoldsCapacityImages) {
  WriteQueue q(3);
  Gate gate;
  q.push([&] { gate.pass(); }, 1, 1);  // runs, holding its image until the gate opens
  q.push([] {}, 1, 1);
  q.push([] {}, 0, 0);  // a record without an image never waits
  q.push([] {}, 1, 1);  // 3 images now: full
  auto fourth = std::async(std::launch::async, [&] { q.push([] {}, 1, 1); });
  EXPECT_EQ(fourth.wait_for(200ms), std::future_status::timeout) << "the fourth image waits for room";
  EXPECT_EQ(q.queued_items(), 3);
  gate.open();
  EXPECT_EQ(fourth.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(q.finish([] { return false; }), 0);
  EXPECT_GT(q.waited_s(), 0.1);
}

TEST(WriteQueue, ATaskLargerThanTheQueueStillGoesWhenItIsEmpty) {
  WriteQueue q(2);
  bool ran = false;
  q.push([&] { ran = true; }, 5, 5);
  EXPECT_EQ(q.finish([] { return false; }), 0);
  EXPECT_TRUE(ran);
}

TEST(WriteQueue, TheFirstErrorStopsTheWriterAndReachesThePusherWithItsType) {
  WriteQueue q(8);
  Gate gate;
  std::atomic<int> ran{0};
  q.push([&] {
    gate.pass();
    throw dpinfer::SystemError("write x", ENOSPC);
  }, 1, 1);
  for (int i = 0; i < 3; ++i) q.push([&] { ++ran; }, 1, 1);
  EXPECT_FALSE(q.failed());
  gate.open();
  ASSERT_TRUE([&] {
    for (auto end = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < end;) {
      if (q.failed()) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }());
  try {
    q.push([&] { ++ran; }, 1, 1);
    FAIL() << "push after a failed task must throw";
  } catch (const dpinfer::SystemError& e) {
    EXPECT_EQ(e.code(), ENOSPC);
  }
  EXPECT_EQ(q.finish([] { return false; }), 0) << "what waited was dropped when the task failed";
  EXPECT_EQ(ran, 0) << "no task runs after the failed one";
  EXPECT_THROW(q.rethrow_if_failed(), dpinfer::SystemError);
}

TEST(WriteQueue, FinishGivesUpWhenAskedAndSaysHowManyItemsItDropped) {
  WriteQueue q(8);
  Gate gate;
  std::atomic<int> ran{0};
  std::atomic<bool> started{false};
  q.push([&] {
    started = true;
    gate.pass();
    ++ran;
  }, 1, 1);
  while (!started) std::this_thread::sleep_for(1ms);  // the first task runs: it is not dropped
  q.push([&] { ++ran; }, 1, 1);
  q.push([&] { ++ran; }, 1, 1);
  q.push([&] { ++ran; }, 0, 0);  // a count, not an item
  const auto t0 = std::chrono::steady_clock::now();
  std::thread opener([&] {
    std::this_thread::sleep_for(300ms);
    gate.open();
  });
  // Gives up at once; the running task still finishes (a write is not cut short).
  EXPECT_EQ(q.finish([] { return true; }), 2);
  opener.join();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms) << "finish() waited for the running task";
  EXPECT_EQ(ran, 1);
}

TEST(WriteQueue, CapacityZeroRunsEachTaskInThePusherAndThrowsThere) {
  WriteQueue q(0);
  const auto me = std::this_thread::get_id();
  bool same_thread = false;
  q.push([&] { same_thread = std::this_thread::get_id() == me; }, 1, 1);
  EXPECT_TRUE(same_thread);
  EXPECT_THROW(q.push([] { throw dpinfer::Error("boom"); }, 1, 1), dpinfer::Error);
  EXPECT_FALSE(q.failed()) << "the serial loop handles its errors as before";
  EXPECT_EQ(q.finish([] { return false; }), 0);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
