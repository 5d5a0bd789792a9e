// tessera::optim: optimizers with parameter groups and learning-rate schedulers, with
// PyTorch's update rules and arithmetic.
#pragma once

#include "tessera/optim/adadelta.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/cosine_annealing_lr.h"
#include "tessera/optim/lambda_lr.h"
#include "tessera/optim/linear_lr.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/optimizer.h"
#include "tessera/optim/sequential_lr.h"
#include "tessera/optim/sgd.h"
#include "tessera/optim/step_lr.h"
#include "tessera/optim/warmup_cosine.h"
