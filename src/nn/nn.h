// tessera::nn: modules, layers and initialisation.
#pragma once

#include "tessera/nn/attention.h"
#include "tessera/nn/batch_scope.h"
#include "tessera/nn/clip_grad.h"
#include "tessera/nn/init.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"
