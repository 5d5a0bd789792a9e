// The CUDA runtime API and the CUDA backend's host-side checks, on any machine: these run
// in the unit suite, where there is usually no GPU. (The kernels themselves are compared
// with the CPU in the gpu suite, tests/gpu.)
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <tessera/tessera.h>

#include "test_support.h"

#if TESSERA_HAS_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <tessera/tensor/attention_geometry.h>
#include <tessera/tensor/cuda/check.h>
#include <tessera/tensor/cuda/kernels.h>
#if TESSERA_HAS_CUDNN
#include <cudnn.h>
#endif
#endif

namespace ts = tessera;
using ts::DType;

using test_support::contains;
using test_support::error_of;

namespace {

}  // namespace

TEST_CASE("the runtime API answers on every build") {
  CHECK(ts::cuda::is_compiled() == (TESSERA_HAS_CUDA != 0));
  CHECK(ts::cuda::is_available() == (ts::cuda::device_count() > 0));
  CHECK(ts::cuda::unavailable_reason().empty() == ts::cuda::is_available());
  CHECK_NOTHROW(ts::cuda::synchronize());

  const bool previous = ts::cuda::allow_tf32();
  CHECK_FALSE(previous);  // off by default, so float32 results match the CPU
  ts::cuda::set_allow_tf32(true);
  CHECK(ts::cuda::allow_tf32());
  ts::cuda::set_allow_tf32(previous);
}

TEST_CASE("without a device, CUDA tensors are a clear error") {
  if (ts::cuda::is_available()) return;  // the gpu suite covers this machine
  const int count = ts::cuda::device_count();
  CHECK(count == 0);
  ts::Tensor host = ts::ones({2, 3});
#if TESSERA_HAS_CUDA
  std::string message = error_of([&] { host.to(ts::Device::cuda(0)); });
  CHECK(contains(message, "cuda:0 requested, but 0 CUDA devices are visible"));
  CHECK_THROWS_AS(ts::zeros({2}, {.device = ts::Device::cuda()}), ts::DeviceError);
  CHECK_THROWS_AS(ts::cuda::device_name(0), ts::DeviceError);
  CHECK_THROWS_AS(ts::cuda::synchronize(0), ts::DeviceError);
  CHECK_THROWS_AS(ts::cuda::caching_allocator_stats(0), ts::DeviceError);
#else
  CHECK(contains(error_of([&] { host.to(ts::Device::cuda(0)); }), "built without CUDA support"));
  CHECK_THROWS_AS(host.to(ts::Device::cuda(0)), ts::NotCompiledError);
  CHECK_THROWS_AS(ts::cuda::device_name(0), ts::NotCompiledError);
#endif
  // CPU work is unaffected.
  CHECK(host.sum().item<float>() == 6.0f);
}

#if TESSERA_HAS_CUDA

TEST_CASE("CUDA, cuBLAS and cuDNN failures name the call, the file and the line") {
  std::string cuda = error_of([] { TS_CUDA_CHECK(cudaErrorInvalidValue); });
  CHECK(contains(cuda, "cudaErrorInvalidValue failed at "));
  CHECK(contains(cuda, "test_cuda_api.cpp:"));
  CHECK(contains(cuda, "invalid argument"));
  CHECK_THROWS_AS(TS_CUDA_CHECK(cudaErrorMemoryAllocation), ts::cuda::CudaError);
  // A fault from an earlier kernel carries the hint to find it.
  CHECK(contains(error_of([] { TS_CUDA_CHECK(cudaErrorIllegalAddress); }), "CUDA_LAUNCH_BLOCKING=1"));
  CHECK_NOTHROW(TS_CUDA_CHECK(cudaSuccess));

  std::string cublas = error_of([] { TS_CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED); });
  CHECK(contains(cublas, "CUBLAS_STATUS_NOT_INITIALIZED failed at "));
  CHECK(contains(cublas, "test_cuda_api.cpp:"));
  CHECK(contains(cublas, "not initialized"));  // cuBLAS's own words for the status
  CHECK_NOTHROW(TS_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));

#if TESSERA_HAS_CUDNN
  std::string cudnn = error_of([] { TS_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM); });
  CHECK(contains(cudnn, "CUDNN_STATUS_BAD_PARAM failed at "));
  CHECK(contains(cudnn, "test_cuda_api.cpp:"));
  CHECK_NOTHROW(TS_CUDNN_CHECK(CUDNN_STATUS_SUCCESS));
#endif
}

// Every CUDA kernel checks its operands before it touches a device: handed CPU tensors,
// each throws DeviceError naming the op, never a CUDA error or a crash. Runs without a GPU.
// (The op table's prepared kernels, such as sum, conv2d and nll_loss_backward, take a call
// the dispatch layer checked and run on that call's device only, so they have no tensor
// entry to misuse.)
TEST_CASE("every CUDA kernel rejects CPU tensors before any device work") {
  namespace cu = ts::cuda;
  using ts::native::BinaryOp;
  using ts::native::UnaryOp;
  ts::Tensor x = ts::ones({2, 3, 4, 4});
  ts::Tensor m = ts::ones({3, 3});
  ts::Tensor v = ts::ones({3});
  ts::Tensor w = ts::ones({2, 3, 3, 3});
  ts::Tensor labels = ts::zeros({3}, {.dtype = DType::i64});
  ts::Tensor mask = ts::ones({3, 3}, {.dtype = DType::u8});
  ts::Tensor condition = ts::ones({3, 3}, {.dtype = DType::boolean});
  ts::Tensor indices = ts::zeros({2, 3, 2, 2}, {.dtype = DType::i64});
  ts::Tensor scalar = ts::ones({});
  ts::Tensor square_index = ts::zeros({3, 3}, {.dtype = DType::i64});
  const ts::native::AttentionOptions attention{};
  const ts::native::AttentionGeometry geometry = ts::native::check_attention_operands(m, m, m, attention, "test");
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"copy_", [&] { cu::copy_(m, m); }},
      {"fill_", [&] { cu::fill_(m, 1.0); }},
      {"neg", [&] { cu::unary(UnaryOp::neg, m); }},
      {"add", [&] { cu::binary(BinaryOp::add, m, m); }},
      {"add", [&] { cu::binary(BinaryOp::add, m, 2.0); }},
      {"add", [&] { cu::binary(BinaryOp::add, 2.0, m); }},
      {"mul", [&] { cu::binary_(BinaryOp::mul, m, m); }},
      {"mul", [&] { cu::binary_(BinaryOp::mul, m, 2.0); }},
      {"add", [&] { cu::add_scaled_(m, m, 0.5); }},
      {"where", [&] { cu::where(condition, m, m); }},
      {"relu_backward", [&] { cu::relu_backward(m, m); }},
      {"matmul", [&] { cu::matmul(m, m); }},
      {"linear", [&] { cu::linear(m, m, v); }},
      {"conv2d_backward_input", [&] { cu::conv2d_backward_input(ts::ones({2, 2, 2, 2}), w, x.sizes(), {}); }},
      {"conv2d_backward_weight", [&] { cu::conv2d_backward_weight(ts::ones({2, 2, 2, 2}), x, w.sizes(), {}); }},
      {"max_pool2d", [&] { cu::max_pool2d(x, {}); }},
      {"max_pool2d_backward", [&] { cu::max_pool2d_backward(ts::ones({2, 3, 2, 2}), indices, x.sizes()); }},
      {"log_softmax", [&] { cu::log_softmax(m, 1); }},
      {"log_softmax_backward", [&] { cu::log_softmax_backward(m, m, 1); }},
      {"softmax", [&] { cu::softmax(m, 1); }},
      {"softmax_backward", [&] { cu::softmax_backward(m, m, 1); }},
      {"nll_loss", [&] { cu::nll_loss(m, labels, {}, ts::Reduction::mean, -100); }},
      {"cross_entropy_backward_",
       [&] { cu::cross_entropy_backward_(m, scalar, labels, {}, ts::Reduction::mean, -100, scalar); }},
      {"dropout", [&] { cu::dropout(m, 0.5, {}); }},
      {"dropout_backward", [&] { cu::dropout_backward(m, mask, 0.5); }},
      {"tril", [&] { cu::triangle(m, 0, ts::native::Triangle::lower); }},
      {"triu", [&] { cu::triangle(m, 1, ts::native::Triangle::upper); }},
      {"index_select", [&] { cu::index_select(m, 0, labels); }},
      {"index_add", [&] { cu::index_add_(m, 0, labels, m); }},
      {"gather", [&] { cu::gather(m, 1, square_index); }},
      {"scatter_add", [&] { cu::scatter_add_(m, 1, square_index, m); }},
      {"topk", [&] { cu::topk(m, 2, 1, true); }},
      {"cumsum", [&] { cu::cumsum(m, 0, false); }},
      {"searchsorted", [&] { cu::searchsorted(m, m, false); }},
      {"scaled_dot_product_attention", [&] { cu::scaled_dot_product_attention({m, m, m, attention, geometry}); }},
      {"scaled_dot_product_attention_backward",
       [&] { cu::scaled_dot_product_attention_backward({{m, m, m, attention, geometry}, m, m, v}); }},
  };
  for (const auto& [op, call] : calls) {
    CAPTURE(op);
    std::string message;
    try {
      call();
    } catch (const ts::DeviceError& e) {
      message = e.what();
    } catch (const ts::NotCompiledError& e) {
      // Without cuDNN, convolution and softmax on CUDA say so before anything else.
      CHECK_FALSE(TESSERA_HAS_CUDNN);
      CHECK(contains(e.what(), "needs cuDNN"));
      continue;
    } catch (const std::exception& e) {
      FAIL_CHECK("threw something other than DeviceError: " << std::string(e.what()));
      continue;
    }
    CHECK(contains(message, op + ": the CUDA kernel was given a cpu tensor"));
  }
}

#endif
