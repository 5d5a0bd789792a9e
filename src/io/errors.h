// Errors of file input and output. IOError: the operating system refused (a missing
// directory, a full disk); its message names the path and strerror. FormatError: the bytes
// are not what the format promises (a truncated or hostile file, invalid JSON); its message
// names the file, the tensor when there is one, and the byte offset.
#pragma once

#include "tessera/tensor/error.h"

namespace tessera::io {

class IOError : public Error { using Error::Error; };
class FormatError : public IOError { using IOError::IOError; };

}  // namespace tessera::io
