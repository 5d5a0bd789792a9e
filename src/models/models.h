// tessera::models: ready-made networks with torchvision's structure and parameter names.
#pragma once

#include "tessera/models/resnet.h"
