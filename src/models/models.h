// tessera::models: ready-made networks with their reference's structure and parameter names
// (torchvision's ResNet, Hugging Face's GPT-2).
#pragma once

#include "tessera/models/gpt2.h"
#include "tessera/models/resnet.h"
