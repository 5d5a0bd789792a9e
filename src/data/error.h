// The error the data pipeline throws for a bad or missing data file: its message names
// the file and, for a malformed one, the byte offset and what was expected there.
#pragma once

#include "tessera/tensor/error.h"

namespace tessera::data {

class DataError : public Error {
  using Error::Error;
};

}  // namespace tessera::data
