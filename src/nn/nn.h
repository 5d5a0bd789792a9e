// tessera::nn: modules, layers and initialisation.
#pragma once

#include "tessera/nn/activation.h"
#include "tessera/nn/attention.h"
#include "tessera/nn/batch_scope.h"
#include "tessera/nn/activation_checkpoint.h"
#include "tessera/nn/clip_grad.h"
#include "tessera/nn/containers.h"
#include "tessera/nn/embedding.h"
#include "tessera/nn/init.h"
#include "tessera/nn/layer_norm.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"
#include "tessera/nn/module_holder.h"
#include "tessera/nn/multihead_attention.h"
#include "tessera/nn/sharded_parameter.h"
#include "tessera/nn/upsample.h"
#include "tessera/nn/transformer.h"
