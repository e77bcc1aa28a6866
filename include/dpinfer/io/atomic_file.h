#pragma once
// Outputs are written atomically: to a temporary in the same directory, fsync'd,
// then renamed into place. A file that exists under its final name is complete.

#include <string>
#include <string_view>

namespace dpinfer::io {

/// Writes `bytes` to `path` atomically (see above). Throws Error naming the path.
void write_file_atomically(const std::string& path, std::string_view bytes);

/// Removes the temporaries that write_file_atomically() left in `dir` when a
/// process died mid-write: those of dead processes on this host, and any older
/// than an hour. Temporaries of live writers are kept. Returns how many went.
size_t remove_stale_temporaries(const std::string& dir);

/// True when a temporary of write_file_atomically() has this file name.
bool is_temporary_name(const std::string& file_name);

}  // namespace dpinfer::io
