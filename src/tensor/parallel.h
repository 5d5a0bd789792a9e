// The number of CPU threads Tessera's kernels (OpenMP loops and Eigen's GEMM) use.
#pragma once

namespace tessera {

void set_num_threads(int threads);
int get_num_threads();

}  // namespace tessera
