// The folder write_sharded is about to fill, checked and held (see output_folder.h). Internal.
#pragma once

#include <memory>
#include <string>

#include "tessera/checkpoint/folder_lock.h"

namespace tessera::checkpoint::detail {

class OutputFolderClaim {
 public:
  // Resolves `directory`, refuses it unless it is missing, empty or write_sharded's own
  // (CheckpointError naming what is there), and takes its parent's lock when the parent is
  // a checkpoint folder (CheckpointError naming the job that holds it).
  explicit OutputFolderClaim(const std::string& directory);

  const std::string& path() const { return path_; }    // resolved
  bool exists() const { return exists_; }
  bool is_empty() const { return empty_; }

 private:
  std::string path_;
  bool exists_ = false;
  bool empty_ = true;
  std::unique_ptr<FolderLock> parent_lock_;
};

}  // namespace tessera::checkpoint::detail
