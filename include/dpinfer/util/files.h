#pragma once
// Questions about paths that the model folders and their caches make tricky, and
// reading a small file whole with a message that says why it could not be read.

#include <cstdint>
#include <string>

namespace dpinfer {

/// Whether `path` is a regular file, links followed. Throws Error, naming the path, for
/// a link whose target is gone (an interrupted Hugging Face download leaves such links
/// in snapshots/) and for a loop of links, rather than calling either "missing".
/// POSIX calls rather than std::filesystem: the PyPI libtorch.so exports its own
/// std::filesystem symbols, and calls from its users can bind to them.
bool file_exists(const std::string& path);

/// Why opening `path` failed with errno `err`, in words for a message that names the
/// path: "a broken symbolic link (its target is missing)" (ENOENT, told apart with
/// lstat), "a loop of symbolic links" (ELOOP), else strerror(err) ("No such file or
/// directory", "Permission denied"). So a dangling or looping link is never called missing.
std::string open_error_text(const std::string& path, int err);

/// How read_whole_file() went.
enum class ReadStatus { kOk, kCannotOpen, kIsDirectory, kTooLarge, kReadError };

/// Reads `path` (links followed) whole into `*content` when it holds at most `max_bytes`:
/// a regular file, or a pipe or device read until its end (`<(cat prompts.txt)`), never
/// more than `max_bytes` + 1 bytes of it. Otherwise sets `*why` to what is wrong, for a
/// message that names the file: open_error_text(), "a directory, not a file", "N bytes,
/// more than the limit of M" ("more than M bytes" for a pipe), or a read error.
ReadStatus read_whole_file(const std::string& path, uintmax_t max_bytes, std::string* content, std::string* why);

}  // namespace dpinfer
