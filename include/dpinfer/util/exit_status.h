#pragma once
// The exit statuses of every dpinfer command (README, "Exit statuses"): one contract,
// shared by the launcher, the worker (`dpinfer generate`), inspect, merge and status.

namespace dpinfer::exit_status {

constexpr int kSuccess = 0;
/// A fatal error: the command itself could not do its job (a port busy, a fork that
/// failed, a lost peer, an internal error).
constexpr int kFailure = 1;
/// Bad input the user can fix: the command line, a prompts file, a config, a model.
constexpr int kBadInput = 2;
/// The run finished but some items failed (generate), or are failed or missing (status).
constexpr int kItemsFailed = 3;
/// The run does not fit the device memory: refused at the start by --max-device-memory's plan, or out of
/// memory during the run. One line names the budget and the next option to try.
constexpr int kOutOfMemory = 4;
/// The worker command exists but cannot be executed (as a shell says).
constexpr int kNotExecutable = 126;
/// The worker command was not found (as a shell says).
constexpr int kNotFound = 127;
/// 128+n: killed by signal n, or stopped by signal n after a clean shutdown.
constexpr int kSignalBase = 128;

}  // namespace dpinfer::exit_status
