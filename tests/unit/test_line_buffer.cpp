#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dpinfer/launcher/line_buffer.h"

using dpinfer::launcher::LineBuffer;
using dpinfer::launcher::LineTail;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)
struct Collect {
  std::vector<std::string> lines;
  LineBuffer::Sink sink() {
    return [this](std::string_view l) { lines.emplace_back(l); };
  }
};

TEST(LineBuffer, JoinsLinesSplitAcrossReads) {
  LineBuffer b;
  Collect c;
  b.feed("hel", c.sink());
  EXPECT_TRUE(c.lines.empty());
  b.feed("lo\nwor", c.sink());
  b.feed("ld\n\nlast", c.sink());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"hello", "world", ""}));
  b.finish(c.sink());
  EXPECT_EQ(c.lines.back(), "last");
  EXPECT_TRUE(b.empty());
}

TEST(LineBuffer, BoundsALineWithoutNewline) {
  LineBuffer b;
  Collect c;
  std::string big(LineBuffer::kMaxLine * 2 + 10, 'x');
  b.feed(big, c.sink());
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0].size(), LineBuffer::kMaxLine);
  b.finish(c.sink());
  EXPECT_EQ(c.lines.back().size(), 10u);
}

TEST(LineBuffer, FinishWithNothingPendingEmitsNothing) {
  LineBuffer b;
  Collect c;
  b.feed("a\n", c.sink());
  b.finish(c.sink());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"a"}));
}

TEST(LineTail, KeepsTheLastLines) {
  LineTail t(2);
  t.push("1");
  t.push("2");
  t.push("3");
  ASSERT_EQ(t.lines().size(), 2u);
  EXPECT_EQ(t.lines().front(), "2");
  EXPECT_EQ(t.lines().back(), "3");
}

// Issue 11, item 17: tqdm redraws its bar after a bare "\r" and writes "\n" only at
// the end. Each redraw is a line of its own: it reaches the console at once, prefixed,
// instead of vanishing until the end and then overwriting the "[rank N] " prefix.
TEST(LineBuffer, ABareCarriageReturnEndsALine) {
  LineBuffer b;
  Collect c;
  b.feed("\r  0%|          |\r 50%|#####     |", c.sink());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"  0%|          |"})) << "the first redraw is out already";
  b.feed("\r100%|##########|\n", c.sink());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"  0%|          |", " 50%|#####     |", "100%|##########|"}))
      << "no empty line for the \\r that starts each redraw";
  b.finish(c.sink());
  EXPECT_EQ(c.lines.size(), 3u);
}

TEST(LineBuffer, CrLfIsOneLineEndEvenSplitAcrossReads) {
  LineBuffer b;
  Collect c;
  b.feed("dos line\r", c.sink());
  b.feed("\nnext\r\n\r\nafter a blank one\n", c.sink());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"dos line", "next", "", "after a blank one"}));
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
