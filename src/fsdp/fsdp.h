// tessera::fsdp: Fully Sharded Data Parallel training.
#pragma once

#include "tessera/fsdp/flat_layout.h"
#include "tessera/fsdp/fully_shard.h"
