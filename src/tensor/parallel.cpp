#include "tessera/tensor/parallel.h"

#include <omp.h>

#include "tessera/tensor/error.h"

namespace tessera {

void set_num_threads(int threads) {
  TS_CHECK(threads > 0, ValueError, "set_num_threads: expected a positive count, got ", threads);
  omp_set_num_threads(threads);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace tessera
