// tessera::io: safetensors files (io::save, io::load), JSON, and the files behind them that
// are replaced whole or not at all (AtomicFile, durable renames); IOError and FormatError.
#pragma once

#include "tessera/io/atomic_file.h"
#include "tessera/io/crc32c.h"
#include "tessera/io/durable.h"
#include "tessera/io/errors.h"
#include "tessera/io/json.h"
#include "tessera/io/safetensors.h"
