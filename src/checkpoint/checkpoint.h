// tessera::checkpoint: sharded and full checkpoints that load at any world size, resume
// training exactly, and survive crashes. See docs/checkpoints.md.
#pragma once

#include "tessera/checkpoint/errors.h"
#include "tessera/checkpoint/flat_source.h"
#include "tessera/checkpoint/full.h"
#include "tessera/checkpoint/manager.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/checkpoint/output_folder.h"
#include "tessera/checkpoint/sharded.h"
#include "tessera/checkpoint/stateful.h"
#include "tessera/checkpoint/training_state.h"
