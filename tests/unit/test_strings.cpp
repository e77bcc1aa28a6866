// printable() and quote(): what a message may show of text it did not write.
#include <gtest/gtest.h>

#include <string>

#include "dpinfer/util/strings.h"

using namespace dpinfer;

TEST(Printable, EscapesControlsInvalidBytesAndC1) {
  EXPECT_EQ(printable("a\nb\tc\x1b]0;title\x07"), "a\\nb\\tc\\x1B]0;title\\x07");
  EXPECT_EQ(printable("\x7f"), "\\x7F");
  EXPECT_EQ(printable("caf\xC3\xA9"), "caf\xC3\xA9");  // é stays
  EXPECT_EQ(printable("\xC2\x9B" "2J"), "\\x9B2J");     // C1 CSI
  EXPECT_EQ(printable("bad \xFF byte"), "bad \\xFF byte");
}

// A tensor name or prompt may hold U+202E (right-to-left override) and its kin, which
// reorder what the terminal shows after them ("Trojan Source"), or U+2028, a line break.
TEST(Printable, EscapesLineSeparatorsAndBidiControls) {
  EXPECT_EQ(printable("a\xE2\x80\xAE" "b"), "a\\u202Eb");        // U+202E RLO
  EXPECT_EQ(printable("a\xE2\x80\xA8" "b"), "a\\u2028b");        // U+2028 LINE SEPARATOR
  EXPECT_EQ(printable("\xE2\x81\xA6x\xE2\x81\xA9"), "\\u2066x\\u2069");  // isolates
  EXPECT_EQ(printable("\xD8\x9C"), "\\u061C");                   // ARABIC LETTER MARK
  EXPECT_EQ(printable("\xE2\x80\x94"), "\xE2\x80\x94");          // an em dash is left alone
}

TEST(Printable, CutsLongTextAtACharacterBoundary) {
  const std::string big(5'000'000, 'x');
  const std::string cut = printable(big, 200);
  EXPECT_EQ(cut, std::string(200, 'x') + "...");
  EXPECT_EQ(printable(std::string(10, '\xC3') , 8).size(), 8u + 3u);  // ten invalid bytes: 4-byte escapes, cut
  std::string accents;
  for (int i = 0; i < 150; ++i) accents += "\xC3\xA9";
  const std::string p = printable(accents, 201);
  EXPECT_EQ(p.substr(p.size() - 3), "...");
  EXPECT_EQ(p.size() % 2, 1u);  // whole two-byte characters, then "..."
}

TEST(Quote, WrapsPrintableInSingleQuotes) {
  EXPECT_EQ(quote("a\nb"), "'a\\nb'");
  EXPECT_EQ(quote(std::string(300, 'y'), 10), "'" + std::string(10, 'y') + "...'");
}
