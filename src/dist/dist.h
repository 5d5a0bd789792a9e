// tessera::dist, the distributed runtime: init() gives the world ProcessGroup, whose
// collectives (all_gather_into, reduce_scatter_into, all_reduce, broadcast, barrier, each
// blocking or asynchronous) move tensors between ranks. See docs/distributed.md.
#pragma once

#include "tessera/dist/collective.h"
#include "tessera/dist/device_mesh.h"
#include "tessera/dist/errors.h"
#include "tessera/dist/fingerprint.h"
#include "tessera/dist/init.h"
#include "tessera/dist/new_group.h"
#include "tessera/dist/process_group.h"
#include "tessera/dist/single_process_group.h"
#include "tessera/dist/work.h"
