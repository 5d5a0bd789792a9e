// tessera::data: datasets (MNIST, ImageFolder, TokenDataset), transforms, samplers and the
// DataLoader that batches them; DataError for a bad or missing data file.
#pragma once

#include "tessera/data/dataloader.h"
#include "tessera/data/dataset.h"
#include "tessera/data/error.h"
#include "tessera/data/idx.h"
#include "tessera/data/image.h"
#include "tessera/data/image_folder.h"
#include "tessera/data/image_transforms.h"
#include "tessera/data/mnist.h"
#include "tessera/data/sampler.h"
#include "tessera/data/in_memory_token_dataset.h"
#include "tessera/data/token_dataset.h"
#include "tessera/data/token_file.h"
#include "tessera/data/transforms.h"
