// Errors of checkpoints beyond those of file formats (io::FormatError names the corrupt file
// and byte offset; io::IOError an operating-system failure; ValueError a checkpoint that
// does not fit the model or optimizer): a collective save or load that failed on another
// rank. Every rank throws, so no rank is left waiting; the rank that failed rethrows its own
// error, and the others throw a CheckpointError quoting it.
#pragma once

#include "tessera/tensor/error.h"

namespace tessera::checkpoint {

class CheckpointError : public Error { using Error::Error; };

}  // namespace tessera::checkpoint
