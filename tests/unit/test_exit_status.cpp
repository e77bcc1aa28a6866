#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>

#include "dpinfer/launcher/termination.h"
#include "dpinfer/util/signal_names.h"

using namespace dpinfer::launcher;
using dpinfer::signal_name;
namespace exit_status = dpinfer::exit_status;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)
// Wait statuses as the kernel encodes them (<sys/wait.h> on Linux).
int exited_status(int code) { return (code & 0xff) << 8; }
int signaled_status(int sig) { return sig & 0x7f; }

TEST(ExitStatus, DecodesANormalExit) {
  Termination t = Termination::from_wait_status(exited_status(3));
  EXPECT_FALSE(t.signaled);
  EXPECT_EQ(t.code, 3);
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(t.shell_status(), 3);
  EXPECT_EQ(t.describe(), "exit code 3");
  EXPECT_TRUE(Termination::from_wait_status(exited_status(0)).ok());
}

TEST(ExitStatus, DecodesASignalAs128PlusN) {
  Termination t = Termination::from_wait_status(signaled_status(SIGKILL));
  EXPECT_TRUE(t.signaled);
  EXPECT_EQ(t.signal, SIGKILL);
  EXPECT_EQ(t.shell_status(), 137);
  EXPECT_EQ(t.describe(), "signal 9 (SIGKILL)");
  EXPECT_EQ(Termination::from_wait_status(signaled_status(SIGSEGV)).shell_status(), 139);
}

TEST(ExitStatus, NamesSignals) {
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
  EXPECT_EQ(signal_name(SIGHUP), "SIGHUP");
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
}

TEST(ExitStatus, ContractValues) {
  EXPECT_EQ(exit_status::kBadInput, 2);
  EXPECT_EQ(exit_status::kNotFound, 127);
  EXPECT_EQ(exit_status::kNotExecutable, 126);
  EXPECT_EQ(exit_status::kSignalBase + SIGINT, 130);
  EXPECT_EQ(exit_status::kSignalBase + SIGTERM, 143);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
