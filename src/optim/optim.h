// tessera::optim: optimizers and learning-rate schedulers, with PyTorch's update rules.
#pragma once

#include "tessera/optim/adadelta.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/optimizer.h"
#include "tessera/optim/sgd.h"
#include "tessera/optim/step_lr.h"
