// The aggregated progress line (launcher/progress.h): the report format, the sum
// over ranks, the rate and ETA, and what reaches stderr on a terminal and off one.
#include <gtest/gtest.h>

#include <string>

#include "dpinfer/launcher/progress.h"

using namespace dpinfer::launcher;
using dpinfer::plan::format_progress_report;
using dpinfer::plan::parse_progress_report;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

ProgressReport report(int rank, int world, int64_t done, int64_t todo, int64_t total, int64_t skipped = 0,
                      int64_t failed = 0) {
  ProgressReport r;
  r.rank = rank;
  r.world = world;
  r.counts = {done, skipped, failed};
  r.todo = todo;
  r.total = total;
  return r;
}

std::string shown(const ProgressAggregator& a) { return format_progress(a.snapshot()); }


TEST(ProgressReport, RoundTripsThroughItsJsonLine) {
  ProgressReport r = report(1, 4, 7, 10, 40, 2, 1);
  EXPECT_EQ(format_progress_report(r),
            R"({"done":7,"failed":1,"rank":1,"skipped":2,"todo":10,"total":40,"world":4})");
  auto back = parse_progress_report(format_progress_report(r));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->world, 4);
  EXPECT_EQ(back->counts.done, 7);
  EXPECT_EQ(back->counts.skipped, 2);
  EXPECT_EQ(back->counts.failed, 1);
  EXPECT_EQ(back->todo, 10);
  EXPECT_EQ(back->total, 40);
  EXPECT_FALSE(back->group);

  r.rank = 0;
  r.group = ProgressCounts{30, 5, 2};
  back = parse_progress_report(format_progress_report(r));
  ASSERT_TRUE(back && back->group);
  EXPECT_EQ(back->group->done, 30);
  EXPECT_EQ(back->group->skipped, 5);
  EXPECT_EQ(back->group->failed, 2);
}

TEST(ProgressReport, AnythingElseIsNotAReport) {
  for (const char* line : {
           "", "hello", "[1,2]", "{}", "{\"rank\":0}",
           R"({"rank":0,"world":1,"done":1,"skipped":0,"failed":0,"todo":-1})",              // no total
           R"({"rank":0,"world":1,"done":-1,"skipped":0,"failed":0,"todo":-1,"total":5})",   // negative count
           R"({"rank":2,"world":2,"done":1,"skipped":0,"failed":0,"todo":-1,"total":5})",    // rank >= world
           R"({"rank":0,"world":1,"done":1.5,"skipped":0,"failed":0,"todo":-1,"total":5})",  // not an integer
           R"({"rank":0,"world":1,"done":1,"skipped":0,"failed":0,"todo":-1,"total":5,"group":3})",
           R"({"rank":0,"world":1,"done":1,"skipped":0,"failed":0,"todo":-1,"total":5,"group":{"done":1}})",
           R"({"rank":0,"world":1,"done":1,"skipped":0,"failed":0,"todo":-1,"total":5)",  // torn
       })
    EXPECT_FALSE(parse_progress_report(line)) << line;
}

TEST(ProgressAggregator, SumsTheRanksAndMeasuresTheRate) {
  ProgressAggregator a(2);
  EXPECT_FALSE(a.has_reports());
  a.add(report(0, 2, 0, 20, 40), 100.0);
  EXPECT_TRUE(a.has_reports());
  EXPECT_EQ(shown(a), "0/40 images (0.0%)") << "no rate before a second report";
  a.add(report(1, 2, 0, 20, 40), 100.0);
  a.add(report(0, 2, 6, 20, 40), 110.0);
  a.add(report(1, 2, 4, 20, 40), 110.0);
  ProgressSnapshot s = a.snapshot();
  EXPECT_EQ(s.processed, 10);
  EXPECT_EQ(s.total, 40);
  EXPECT_DOUBLE_EQ(s.rate, 1.0);
  EXPECT_FALSE(s.node_only);
  EXPECT_EQ(format_progress(s), "10/40 images (25.0%), 1.00 images/s, ETA 30s");
  a.add(report(0, 2, 20, 20, 40), 120.0);
  a.add(report(1, 2, 20, 20, 40), 120.0);
  EXPECT_EQ(shown(a), "40/40 images (100.0%), 2.00 images/s") << "no ETA once done";
}

TEST(ProgressAggregator, TheRateFollowsTheLastWindow) {
  ProgressAggregator a(1, 60);
  for (int t = 0; t <= 100; t += 10) a.add(report(0, 1, t <= 50 ? t / 10 : 5 + (t - 50), -1, 1000), t);
  // 1 image per 10 s for 50 s, then 1 per second: the last 60 s hold the change at 40 s..100 s.
  EXPECT_NEAR(a.snapshot().rate, (55.0 - 4.0) / 60.0, 1e-9);
  for (int t = 110; t <= 200; t += 10) a.add(report(0, 1, 55 + (t - 100), -1, 1000), t);
  EXPECT_NEAR(a.snapshot().rate, 1.0, 1e-9) << "the slow start has left the window";
}

TEST(ProgressAggregator, SkippedItemsCountAsDoneButNotForTheRate) {
  ProgressAggregator a(1);
  a.add(report(0, 1, 0, 100, 100, 90), 0.0);
  a.add(report(0, 1, 5, 100, 100, 90), 10.0);
  ProgressSnapshot s = a.snapshot();
  EXPECT_EQ(s.processed, 95);
  EXPECT_DOUBLE_EQ(s.rate, 0.5);
  EXPECT_EQ(format_progress(s), "95/100 images (95.0%), 0.50 images/s, ETA 10s, 90 skipped");
}

TEST(ProgressAggregator, FailedItemsAreDoneAndNamed) {
  ProgressAggregator a(1);
  a.add(report(0, 1, 0, 10, 10), 0.0);
  a.add(report(0, 1, 6, 10, 10, 0, 2), 4.0);
  EXPECT_EQ(shown(a), "8/10 images (80.0%), 2.00 images/s, ETA 1s, 2 failed");
}

TEST(ProgressAggregator, DynamicModeNeedsNoPerRankTodo) {
  ProgressAggregator a(2);
  a.add(report(0, 2, 0, -1, 10), 0.0);
  a.add(report(1, 2, 0, -1, 10), 0.0);
  a.add(report(0, 2, 3, -1, 10), 2.0);
  a.add(report(1, 2, 1, -1, 10), 2.0);
  EXPECT_EQ(shown(a), "4/10 images (40.0%), 2.00 images/s, ETA 3s");
}

TEST(ProgressAggregator, ANodeWithoutRankZeroShowsItsOwnShare) {
  // Node 1 of 2, two workers each: ranks 2 and 3 of 4.
  ProgressAggregator a(2);
  a.add(report(2, 4, 0, 5, 20), 0.0);
  EXPECT_EQ(shown(a), "0 images on this node") << "rank 3's share is not known yet";
  a.add(report(3, 4, 0, 5, 20), 0.0);
  a.add(report(2, 4, 2, 5, 20), 1.0);
  a.add(report(3, 4, 2, 5, 20), 1.0);
  ProgressSnapshot s = a.snapshot();
  EXPECT_TRUE(s.node_only);
  EXPECT_EQ(format_progress(s), "4/10 images on this node (40.0%), 4.00 images/s, ETA 2s");

  ProgressAggregator dynamic(2);
  dynamic.add(report(2, 4, 0, -1, 20), 0.0);
  dynamic.add(report(3, 4, 0, -1, 20), 0.0);
  dynamic.add(report(2, 4, 3, -1, 20), 2.0);
  EXPECT_EQ(shown(dynamic), "3 images on this node, 1.50 images/s") << "no share, so no total and no ETA";
}

TEST(ProgressAggregator, RankZeroBringsTheWholeRunWithPeersElsewhere) {
  // Node 0 of 2, one worker each: rank 0 here, rank 1 on the other node.
  ProgressAggregator a(1);
  ProgressReport r = report(0, 2, 0, 5, 10);
  r.group = ProgressCounts{0, 0, 0};
  a.add(r, 0.0);
  r.counts.done = 2;
  r.group = ProgressCounts{5, 1, 0};
  a.add(r, 2.0);
  ProgressSnapshot s = a.snapshot();
  EXPECT_FALSE(s.node_only);
  EXPECT_EQ(format_progress(s), "6/10 images (60.0%), 2.50 images/s, ETA 2s, 1 skipped");
}

TEST(ProgressAggregator, ARestartedRankCountsAgainFromItsNewReport) {
  ProgressAggregator a(2);
  a.add(report(0, 2, 0, 5, 10), 0.0);
  a.add(report(1, 2, 0, 5, 10), 0.0);
  a.add(report(0, 2, 3, 5, 10), 3.0);
  a.add(report(1, 2, 3, 5, 10), 3.0);
  EXPECT_EQ(a.snapshot().processed, 6);
  // Both ranks restart: what they made is now skipped, and their counters begin again.
  a.add(report(0, 2, 0, 5, 10, 3), 5.0);
  a.add(report(1, 2, 0, 5, 10, 3), 5.0);
  ProgressSnapshot s = a.snapshot();
  EXPECT_EQ(s.processed, 6) << "nothing counted twice, nothing lost";
  EXPECT_EQ(s.skipped, 6);
  EXPECT_DOUBLE_EQ(s.rate, 6.0 / 5.0) << "no negative work from the counters going back";
  a.add(report(0, 2, 2, 5, 10, 3), 7.0);
  a.add(report(1, 2, 2, 5, 10, 3), 7.0);
  EXPECT_EQ(a.snapshot().processed, 10);
  EXPECT_DOUBLE_EQ(a.snapshot().rate, 10.0 / 7.0) << "the restarted ranks' new images count";
}

TEST(ProgressFormat, DurationsUseTheTwoLargestUnits) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(0.2), "1s") << "rounded up: an ETA never says 0s too early";
  EXPECT_EQ(format_duration(59.5), "1m00s");
  EXPECT_EQ(format_duration(1548), "25m48s");
  EXPECT_EQ(format_duration(7500), "2h05m");
  EXPECT_EQ(format_duration(90000), "1d01h");
  EXPECT_EQ(format_duration(1e12), ">99d");
  EXPECT_EQ(format_duration(-3), "0s");
}

TEST(ProgressFormat, ThePercentageIsRoundedDown) {
  ProgressSnapshot s;
  s.processed = 9999;
  s.total = 10000;
  EXPECT_EQ(format_progress(s), "9999/10000 images (99.9%)");
  s.total = 0;
  s.processed = 0;
  EXPECT_EQ(format_progress(s), "0/0 images");
}

TEST(ProgressDisplay, OnATerminalTheLineIsRedrawnInPlaceAndErasedForOtherOutput) {
  ProgressAggregator a(1);
  ProgressDisplay d(true, 30);
  EXPECT_EQ(d.tick(a, 0.0), "") << "nothing before the first report";
  EXPECT_EQ(d.hide(), "");
  a.add(report(0, 1, 0, 10, 10), 0.0);
  EXPECT_EQ(d.next_due(a, 0.0), 0.0);
  EXPECT_EQ(d.tick(a, 0.0), "\r[dpinfer] 0/10 images (0.0%)\x1b[K");
  EXPECT_EQ(d.tick(a, 5.0), "") << "unchanged: not redrawn";
  EXPECT_LT(d.next_due(a, 5.0), 0);

  a.add(report(0, 1, 1, 10, 10), 5.0);
  EXPECT_EQ(d.tick(a, 5.0), "\r[dpinfer] 1/10 images (10.0%), 0.20 images/s, ETA 45s\x1b[K");
  a.add(report(0, 1, 2, 10, 10), 5.1);
  EXPECT_EQ(d.tick(a, 5.1), "") << "a change within the redraw interval waits";
  EXPECT_DOUBLE_EQ(d.next_due(a, 5.1), 5.0 + ProgressDisplay::kRedrawInterval);
  EXPECT_EQ(d.tick(a, 5.25), "\r[dpinfer] 2/10 images (20.0%), 0.39 images/s, ETA 21s\x1b[K");

  // Worker output: erase the line first, then draw it again at once.
  EXPECT_EQ(d.hide(), "\r\x1b[K");
  EXPECT_EQ(d.hide(), "") << "already erased";
  EXPECT_EQ(d.tick(a, 5.3), "\r[dpinfer] 2/10 images (20.0%), 0.39 images/s, ETA 21s\x1b[K");

  d.hide();
  EXPECT_EQ(d.tick(a, 5.4, 20), "\r[dpinfer] 2/10 imag\x1b[K") << "cut to one column short of the width";

  EXPECT_EQ(d.finish(a), "\r\x1b[K[dpinfer] 2/10 images (20.0%), 0.39 images/s, ETA 21s\n")
      << "the last state stays as a plain line";
}

TEST(ProgressDisplay, OffATerminalAPlainLineComesEveryInterval) {
  ProgressAggregator a(1);
  ProgressDisplay d(false, 2.0);
  EXPECT_EQ(d.finish(a), "") << "a worker that never reports shows nothing";
  a.add(report(0, 1, 0, 10, 10), 0.0);
  EXPECT_EQ(d.tick(a, 0.0), "") << "the first line waits one interval";
  EXPECT_DOUBLE_EQ(d.next_due(a, 0.0), 2.0);
  EXPECT_EQ(d.tick(a, 1.9), "");
  EXPECT_EQ(d.tick(a, 2.0), "[dpinfer] 0/10 images (0.0%)\n");
  EXPECT_EQ(d.hide(), "") << "plain lines need no erasing";
  EXPECT_EQ(d.tick(a, 4.0), "") << "the same line again is left out";
  a.add(report(0, 1, 4, 10, 10), 5.0);
  EXPECT_EQ(d.tick(a, 5.0), "");
  EXPECT_EQ(d.tick(a, 6.0), "[dpinfer] 4/10 images (40.0%), 0.80 images/s, ETA 8s\n");
  a.add(report(0, 1, 10, 10, 10), 9.0);
  EXPECT_EQ(d.tick(a, 30.0), "[dpinfer] 10/10 images (100.0%), 1.11 images/s\n");
  EXPECT_DOUBLE_EQ(d.next_due(a, 30.0), 32.0) << "after a stall, no burst of lines";
  EXPECT_EQ(d.finish(a), "") << "the final state was the last line printed";
}

TEST(ProgressDisplay, TheFinalLineComesOffATerminalToo) {
  ProgressAggregator a(2);
  ProgressDisplay d(false, 30.0);
  a.add(report(0, 2, 0, 5, 10), 0.0);
  a.add(report(1, 2, 0, 5, 10), 0.0);
  d.tick(a, 0.0);
  a.add(report(0, 2, 5, 5, 10), 2.0);
  a.add(report(1, 2, 5, 5, 10), 2.5);
  EXPECT_EQ(d.tick(a, 3.0), "");
  EXPECT_EQ(d.finish(a), "[dpinfer] 10/10 images (100.0%), 4.00 images/s\n");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
