// safetensors with CUDA tensors: save copies them to the host, read_into fills a CUDA
// destination. Exits 77 (skipped) where Tessera has no CUDA or the machine has no GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <tessera/tessera.h>

#include "temp_dir.h"

#if TESSERA_HAS_CUDA
#include <tessera/tensor/cuda/cuda_runtime.h>
#endif

namespace ts = tessera;
namespace io = tessera::io;
using ts::DType;

TEST_CASE("safetensors: CUDA tensors save through the host and load into the device") {
  ts::testing::TempDir dir;
  std::string path = dir.file("cuda.safetensors");
  ts::Generator gen(5);
  ts::Tensor host = ts::randn({6, 4}, gen);
  ts::StateDict d;
  d.insert("dense", host.to(ts::Device::cuda()));
  d.insert("transposed", host.to(ts::Device::cuda()).t());  // non-contiguous on the device
  d.insert("bf16", host.to(DType::bf16).to(ts::Device::cuda()));
  io::save(d, path);

  ts::StateDict back = io::load(path);
  CHECK(back.at("dense").device().is_cpu());
  CHECK(back.at("dense").to_vector<float>() == host.to_vector<float>());
  CHECK(back.at("transposed").to_vector<float>() == host.t().to_vector<float>());
  CHECK(back.at("bf16").to_vector<float>() == host.to(DType::bf16).to_vector<float>());

  io::SafetensorsFile file(path);
  ts::Tensor shard = ts::zeros({8}, {.device = ts::Device::cuda()});
  file.read_into("dense", 8, shard);
  CHECK(shard.device().is_cuda());
  CHECK(shard.to_vector<float>() == host.flatten().narrow(0, 8, 8).to_vector<float>());
}

int main(int argc, char** argv) {
#if TESSERA_HAS_CUDA
  if (!ts::cuda::is_available()) return 77;
  doctest::Context context(argc, argv);
  return context.run();
#else
  (void)argc, (void)argv;
  return 77;
#endif
}
