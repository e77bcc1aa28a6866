#pragma once
// The run's secret (issue 33): 128 random bits that every rank of one run shares and that
// nobody else can read. Every key of the rendezvous store lives under it, so that a client
// without it (another user on a shared node, another host on the cluster network) can
// neither read nor write the run's keys, and a rank of another run is refused at once.
//
// Where a rank finds it, in order:
// 1. DPINFER_RUN_TOKEN in its environment. `dpinfer launch` on a single node makes a fresh
//    one per run; a user may export one for every node of a multi-node run.
// 2. OUT/.dpinfer-run-token, mode 0600: the first rank to look makes it, atomically
//    (link(), which NFS and Lustre keep atomic too), and the others read it. This serves
//    runs that no single launcher starts: srun's tasks, several nodes' launchers,
//    torchrun. The file survives a SLURM requeue, so the restarted ranks agree again.
//
// The token travels in the environment (/proc/PID/environ is readable by its user only),
// never on a command line (/proc/PID/cmdline is readable by everyone).

#include <map>
#include <string>

namespace dpinfer::plan {

inline constexpr const char* kRunTokenEnv = "DPINFER_RUN_TOKEN";
inline constexpr const char* kRunTokenFile = ".dpinfer-run-token";

struct RunToken {
  std::string value;   ///< 32 to 128 lowercase hex digits
  std::string source;  ///< for messages: "DPINFER_RUN_TOKEN" or the file's path
};

/// 128 bits from the kernel's CSPRNG (getrandom), as 32 lowercase hex digits.
std::string make_run_token();

/// The token from `env`, else from (or into) `out_dir`'s token file (see above). Throws
/// UsageError for a malformed DPINFER_RUN_TOKEN, and InputError for a token file that
/// another user owns, that others may read or write, that is not a regular file, or whose
/// content is not a token: each names what is wrong and what to do.
RunToken run_token(const std::map<std::string, std::string>& env, const std::string& out_dir);

/// A short name of `token` for logs and messages, 8 hex digits (32-bit FNV-1a): enough to
/// tell two tokens apart, and too little of a 128-bit secret to find it from.
std::string run_token_fingerprint(const std::string& token);

}  // namespace dpinfer::plan
