// Durable file-system steps for things bigger than one file (a checkpoint directory): a
// rename survives a crash only once the directory holding the new name is fsynced, and a
// directory's files are durable only once each file and the directory itself are.
//
//   io::fsync_path(dir + "/metadata.json");
//   io::fsync_path(dir);                                  // the directory's entries
//   io::replace_directory(dir, "checkpoints/step-00000100");  // atomic, then fsyncs the parent
#pragma once

#include <string>

namespace tessera::io {

// Flushes a file or a directory to stable storage (fsync). IOError naming the path and the
// OS error; file systems that cannot fsync a directory (EINVAL) are accepted.
void fsync_path(const std::string& path);

// The directory part of `path` ("." when it has none).
std::string parent_directory(const std::string& path);

// Moves the directory `from` to `to` atomically, replacing `to` when it exists (the old
// contents are removed afterwards), and fsyncs the parent of `to`. A crash at any moment
// leaves `to` either as it was or complete with the new contents: an existing `to` is
// swapped with renameat2(RENAME_EXCHANGE). Where the file system cannot exchange, the old
// `to` is first renamed aside, so for a moment no `to` exists. IOError on failure.
void replace_directory(const std::string& from, const std::string& to);

// Removes `path` and everything under it; first renamed to a hidden name in the same
// directory, so that a crash part-way never leaves a half-deleted `path` behind.
void remove_directory_durably(const std::string& path);

}  // namespace tessera::io
