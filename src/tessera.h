// Tessera: one header for users.
//
//   #include <tessera/tessera.h>
//   namespace ts = tessera;
#pragma once

#include "tessera/config.h"
#include "tessera/tensor/all.h"
#include "tessera/autograd/autograd.h"
#include "tessera/io/io.h"
#include "tessera/data/data.h"
#include "tessera/dist/dist.h"
#include "tessera/text/text.h"
#include "tessera/nn/nn.h"
#include "tessera/models/models.h"
#include "tessera/optim/optim.h"
#include "tessera/fsdp/fsdp.h"
#include "tessera/checkpoint/checkpoint.h"
