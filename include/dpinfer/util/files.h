#pragma once
// Questions about paths that the model folders and their caches make tricky.

#include <string>

namespace dpinfer {

/// Whether `path` is a regular file, links followed. Throws Error, naming the path, for
/// a link whose target is gone (an interrupted Hugging Face download leaves such links
/// in snapshots/) and for a loop of links, rather than calling either "missing".
/// POSIX calls rather than std::filesystem: the PyPI libtorch.so exports its own
/// std::filesystem symbols, and calls from its users can bind to them.
bool file_exists(const std::string& path);

}  // namespace dpinfer
