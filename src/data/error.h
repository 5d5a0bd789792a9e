// The error the data pipeline throws for a bad or missing data file: its message names
// the file and, for a malformed one, the byte offset and what was expected there.
//
// One failure, one type: a data file that cannot be read is an input error whichever
// reader met it, so DataError is an io::IOError (as io::FormatError is), and
// `catch (const io::IOError&)` catches every failed read of a file, a dataset's or a
// checkpoint's. data's writers (write_token_file, write_png, write_jpeg) fail with
// io::IOError itself when the file cannot be written, and with DataError when the codec
// (libpng, libjpeg) fails to encode: both caught as io::IOError.
#pragma once

#include "tessera/io/errors.h"

namespace tessera::data {

class DataError : public io::IOError {
  using io::IOError::IOError;
};

}  // namespace tessera::data
