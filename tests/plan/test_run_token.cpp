// The run's secret (plan/run_token.h): from the environment, or from a 0600 file in
// --out that the first rank makes and the others read; refused when anyone else could
// have read or chosen it.
#include "dpinfer/plan/run_token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <set>

#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

using dpinfer::plan::make_run_token;
using dpinfer::plan::run_token;
using dpinfer::plan::run_token_fingerprint;
using dpinfer::test::TempDir;
namespace fs = std::filesystem;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

template <typename E>
std::string error_of(const std::map<std::string, std::string>& env, const std::string& dir) {
  try {
    run_token(env, dir);
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}


TEST(RunToken, FreshTokensAre128RandomBitsInHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string t = make_run_token();
    EXPECT_TRUE(std::regex_match(t, std::regex("[0-9a-f]{32}"))) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(RunToken, TheEnvironmentsTokenComesFirstLowercased) {
  TempDir dir;
  const auto t = run_token({{"DPINFER_RUN_TOKEN", "0123456789ABCDEF0123456789abcdef"}}, dir.path());
  EXPECT_EQ(t.value, "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(t.source, "DPINFER_RUN_TOKEN");
  EXPECT_FALSE(fs::exists(dir.file(".dpinfer-run-token")));
}

TEST(RunToken, AMalformedEnvironmentTokenIsAUsageError) {
  TempDir dir;
  EXPECT_EQ(error_of<dpinfer::UsageError>({{"DPINFER_RUN_TOKEN", "secret"}}, dir.path()),
            "DPINFER_RUN_TOKEN: expected 32 to 128 hex digits, got 6 character(s); make one with `openssl rand -hex "
            "16`, or unset it to let dpinfer choose");
  EXPECT_NE(error_of<dpinfer::UsageError>({{"DPINFER_RUN_TOKEN", std::string(31, 'a') + "g"}}, dir.path()),
            "(no error)");
}

TEST(RunToken, WithoutOneTheFirstRankMakesAFileOnlyItsUserCanReadAndTheOthersReadIt) {
  TempDir dir;
  const auto first = run_token({}, dir.path());
  EXPECT_EQ(first.source, dir.file(".dpinfer-run-token"));
  EXPECT_TRUE(std::regex_match(first.value, std::regex("[0-9a-f]{32}")));
  struct stat st {};
  ASSERT_EQ(::stat(dir.file(".dpinfer-run-token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(dpinfer::test::read_file(dir.file(".dpinfer-run-token")), first.value + "\n");
  EXPECT_EQ(run_token({}, dir.path()).value, first.value);
}

// Ranks that start together race to make the file: one link() wins, and every rank reads
// the winner's token.
TEST(RunToken, RanksRacingToMakeTheFileAgreeOnOne) {
  TempDir dir;
  constexpr int kRanks = 16;
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        const std::string t = run_token({}, dir.path()).value;
        dpinfer::test::write_file(dir.file("rank" + std::to_string(r)), t);
        ::_exit(0);
      } catch (...) {
        ::_exit(1);
      }
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const std::string token = dpinfer::test::read_file(dir.file(".dpinfer-run-token"));
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(dpinfer::test::read_file(dir.file("rank" + std::to_string(r))) + "\n", token) << "rank " << r;
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".dpinfer-run-token."), std::string::npos) << e.path();
}

TEST(RunToken, AFileOthersMayReadIsRefused) {
  TempDir dir;
  dpinfer::test::write_file(dir.file(".dpinfer-run-token"), make_run_token() + "\n");
  ::chmod(dir.file(".dpinfer-run-token").c_str(), 0644);
  EXPECT_EQ(error_of<dpinfer::InputError>({}, dir.path()),
            "'" + dir.file(".dpinfer-run-token") +
                "' has mode 0644, so other users may read or change the run's token; it must be 0600: remove it, and "
                "the next run makes a new one");
}

TEST(RunToken, ASymlinkIsRefused) {
  TempDir dir;
  dpinfer::test::write_file(dir.file("elsewhere"), make_run_token() + "\n");
  ::chmod(dir.file("elsewhere").c_str(), 0600);
  fs::create_symlink(dir.file("elsewhere"), dir.file(".dpinfer-run-token"));
  EXPECT_NE(error_of<dpinfer::InputError>({}, dir.path()).find("is a symbolic link"), std::string::npos);
}

TEST(RunToken, AFileOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can give a file to another user";
  TempDir dir;
  dpinfer::test::write_file(dir.file(".dpinfer-run-token"), make_run_token() + "\n");
  ::chmod(dir.file(".dpinfer-run-token").c_str(), 0600);
  ASSERT_EQ(::chown(dir.file(".dpinfer-run-token").c_str(), 65534, 65534), 0);
  EXPECT_NE(error_of<dpinfer::InputError>({}, dir.path()).find("belongs to user id 65534, not to you"),
            std::string::npos);
}

TEST(RunToken, AFileThatHoldsNoTokenIsRefused) {
  TempDir dir;
  dpinfer::test::write_file(dir.file(".dpinfer-run-token"), "hello\n");
  ::chmod(dir.file(".dpinfer-run-token").c_str(), 0600);
  EXPECT_NE(error_of<dpinfer::InputError>({}, dir.path()).find("does not hold a run token"), std::string::npos);
}

TEST(RunToken, FingerprintsTellTokensApart) {
  const std::string a = make_run_token(), b = make_run_token();
  EXPECT_TRUE(std::regex_match(run_token_fingerprint(a), std::regex("[0-9a-f]{8}")));
  EXPECT_EQ(run_token_fingerprint(a), run_token_fingerprint(a));
  EXPECT_NE(run_token_fingerprint(a), run_token_fingerprint(b));
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
