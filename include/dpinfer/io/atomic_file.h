#pragma once
// Outputs are written atomically: to a temporary in the same directory, fsync'd,
// then renamed into place. A file that exists under its final name is complete.

#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>

namespace dpinfer::io {

/// Writes `bytes` to `path` atomically (see above). Throws Error naming the path.
void write_file_atomically(const std::string& path, std::string_view bytes);

/// The same for a file too large to hold in memory (a WebDataset shard): written in pieces
/// to the temporary, then sync()'d and publish()'d under its name. One that is destroyed
/// unpublished (a run stopped mid-shard) leaves its temporary, which the next run's
/// remove_stale_temporaries() removes; the name never points at a partial file.
class AtomicFileWriter {
 public:
  /// Creates the temporary beside `path`. Throws SystemError naming it.
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(std::string_view bytes);
  /// Makes the bytes durable (fsync) and closes the temporary.
  void sync();
  /// Renames the synced temporary to its name and syncs the directory.
  void publish();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

/// Removes `path`, if it is there, and syncs its directory, so that the removal is on disk
/// before what follows it (a file published in its place). Throws SystemError naming it.
void remove_file_durably(const std::string& path);

/// Removes the temporaries that write_file_atomically() left in `dir` when a
/// process died mid-write: those of dead processes on this host, and any older
/// than an hour. Temporaries of live writers are kept. With `descend`, also in each
/// subdirectory of `dir` (no symbolic link) whose name it accepts, and in theirs that it
/// accepts, and so on (a benchmark layout's 00012/samples/). Returns how many went.
size_t remove_stale_temporaries(const std::string& dir,
                                const std::function<bool(const std::string& name)>& descend = nullptr);

/// Makes the subdirectories of one root that files are written atomically into, on
/// first use and durably: mkdir, then fsync of the root, so that the new entry is on
/// disk before any file renamed into it can be (a crash must not keep the file's record
/// and lose its directory). Remembers each directory it made or found, so that a
/// directory costs one mkdir and one fsync per run, not one per file. Not thread-safe:
/// one writer owns it.
class SubdirectoryMaker {
 public:
  explicit SubdirectoryMaker(std::string root) : root_(std::move(root)) {}

  /// Makes `root/name` unless this maker already has; a `name` with '/' ("00012/samples")
  /// needs its parent made first. One that exists (an earlier run's, another rank's) is
  /// taken, and its parent fsync'd as well: its maker may not have got that far. Throws SystemError naming the path (its
  /// code ENOSPC or EDQUOT on a full disk), or Error when a file of that name is there.
  void ensure(const std::string& name);

 private:
  std::string root_;
  std::unordered_set<std::string> made_;
};

/// True when a temporary of write_file_atomically() has this file name.
bool is_temporary_name(const std::string& file_name);

}  // namespace dpinfer::io
