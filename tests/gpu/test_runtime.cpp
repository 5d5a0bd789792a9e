// The CUDA runtime around the kernels: copies between host and device, conversions on the
// device, the allocator's counters and caching, streams and events, TF32, errors, and
// modules moved to the device.
#include <doctest/doctest.h>

#include <functional>
#include <tessera/tensor/native.h>
#include <tessera/tessera.h>

#include "gpu_test.h"
#include "test_support.h"

#if TESSERA_HAS_CUDA
#include <tessera/tensor/cuda/check.h>
#include <tessera/tensor/cuda/cuda_allocator.h>
#include <tessera/tensor/cuda/stream.h>

#include <future>
#endif

namespace ts = tessera;
using ts::DType;
using ts::Shape;
using ts::Tensor;

using test_support::contains;
using test_support::error_of;

namespace {

Tensor random_of(DType dtype, const Shape& shape, uint64_t seed) {
  ts::Generator gen(seed);
  if (ts::is_floating(dtype)) return (ts::randn(shape, gen, {.dtype = DType::f64}) * 100.0).to(dtype);
  return ts::randint(0, dtype == DType::u8 ? 256 : 1'000'000'000, shape, gen).to(dtype);
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  std::string problem;
  return gpu_test::normalised_error(a, b, problem) == 0.0;
}

// A few layers of the MNIST network, run forward and backward with explicit tensors.
struct SmallNet {
  Tensor conv_w, conv_b, fc_w, fc_b;
  explicit SmallNet(ts::Device device) {
    conv_w = random_of(DType::f32, {8, 1, 3, 3}, 1).mul_(0.003).to(device).requires_grad_();
    conv_b = ts::zeros({8}, {.device = device}).requires_grad_();
    fc_w = random_of(DType::f32, {10, 8 * 13 * 13}, 2).mul_(0.0003).to(device).requires_grad_();
    fc_b = ts::zeros({10}, {.device = device}).requires_grad_();
  }
  Tensor loss(const Tensor& images, const Tensor& targets) const {
    Tensor x = ts::max_pool2d(ts::relu(ts::conv2d(images, conv_w, conv_b)), 2);
    x = ts::dropout(x, 0.25, true, {.seed = 5}).flatten(1);
    return ts::nll_loss(ts::log_softmax(ts::linear(x, fc_w, fc_b), 1), targets);
  }
};

}  // namespace

TEST_CASE("copies between host and device keep every value, every dtype, any size") {
  for (DType dtype : {DType::f32, DType::f64, DType::i64, DType::u8, DType::bf16}) {
    // 3M float64 elements are 24 MB: more than one pinned staging buffer (8 MiB).
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{3'000'001}}) {
      CAPTURE(dtype);
      CAPTURE(count);
      Tensor host = random_of(dtype, {count}, static_cast<uint64_t>(count) + 1);
      Tensor device = host.to(gpu_test::target());
      CHECK(device.device() == gpu_test::target());
      Tensor back = device.cpu();
      CHECK(back.device().is_cpu());
      CHECK(same_values(back, host));
    }
  }
  // Strided views on either side.
  Tensor host = random_of(DType::f32, {40, 30}, 9);
  Tensor device = host.t().to(gpu_test::target());
  CHECK(same_values(device.cpu(), host.t().contiguous()));
  Tensor slice = device.narrow(1, 3, 7);
  CHECK(same_values(slice.cpu(), host.t().contiguous().narrow(1, 3, 7).contiguous()));
  Tensor destination = ts::zeros({30, 40});
  destination.copy_(device);
  CHECK(same_values(destination, host.t().contiguous()));
  Tensor device_destination = ts::zeros({2, 30, 40}, {.device = gpu_test::target()});
  device_destination.copy_(host.t());  // host -> device, broadcast over the leading dim
  CHECK(same_values(device_destination.select(0, 1).cpu(), host.t().contiguous()));
}

TEST_CASE("conversions on the device round like the CPU's, bfloat16 included") {
  Tensor host = random_of(DType::f32, {1000}, 11);
  Tensor device = host.to(gpu_test::target());
  CHECK(same_values(device.to(DType::bf16).cpu(), host.to(DType::bf16)));
  CHECK(same_values(device.to(DType::bf16).to(DType::f32).cpu(), host.to(DType::bf16).to(DType::f32)));
  CHECK(same_values(device.to(DType::f64).cpu(), host.to(DType::f64)));
  CHECK(same_values(device.to(DType::i64).cpu(), host.to(DType::i64)));
  Tensor bytes = random_of(DType::u8, {300}, 12);
  CHECK(same_values(bytes.to(gpu_test::target()).to(DType::f32).cpu(), bytes.to(DType::f32)));
  CHECK(same_values(bytes.to(gpu_test::target()).to(DType::bf16).cpu(), bytes.to(DType::bf16)));
  // Fill converts its value with the host's rules.
  for (DType dtype : {DType::f32, DType::f64, DType::i64, DType::u8, DType::bf16}) {
    CAPTURE(dtype);
    CHECK(same_values(ts::full({7}, 2.7, {.dtype = dtype, .device = gpu_test::target()}).cpu(),
                      ts::full({7}, 2.7, {.dtype = dtype})));
  }
}

TEST_CASE("the device allocator counts current and peak bytes") {
  const ts::Device device = gpu_test::target();
  ts::MemoryStats before = ts::memory_stats(device);
  ts::reset_peak_memory(device);
  {
    Tensor a = ts::empty({1000}, {.device = device});
    CHECK(ts::memory_stats(device).current_bytes - before.current_bytes == 4000);
    {
      Tensor b = ts::empty({250}, {.dtype = DType::f64, .device = device});
      CHECK(ts::memory_stats(device).current_bytes - before.current_bytes == 6000);
    }
    CHECK(ts::memory_stats(device).current_bytes - before.current_bytes == 4000);
  }
  CHECK(ts::memory_stats(device).current_bytes == before.current_bytes);
  CHECK(ts::memory_stats(device).peak_bytes - before.current_bytes == 6000);
  CHECK(ts::memory_stats(device).allocations - before.allocations == 2);
}

TEST_CASE("a steady training step takes all its memory from the cache") {
  if (!gpu_test::cuda_target()) return;
  const ts::Device device = gpu_test::target();
  SmallNet net(device);
  Tensor images = random_of(DType::f32, {16, 1, 28, 28}, 3).mul_(0.01).to(device);
  std::vector<int64_t> classes(16);
  for (int64_t i = 0; i < 16; ++i) classes[i] = i % 10;
  Tensor targets = ts::tensor<int64_t>(classes).to(device);
  auto step = [&] {
    Tensor loss = net.loss(images, targets);
    loss.backward();
    for (Tensor* p : {&net.conv_w, &net.conv_b, &net.fc_w, &net.fc_b}) {
      ts::NoGradGuard no_grad;
      p->sub_(p->grad(), 0.01);
      p->grad().zero_();
    }
    return loss.item<float>();
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up: the cache fills, cuDNN picks its algorithms
  ts::cuda::synchronize();
  const ts::cuda::CachingAllocatorStats warm = ts::cuda::caching_allocator_stats(0);
  const int64_t held = ts::memory_stats(device).current_bytes;
  float last = 0;
  for (int i = 0; i < 5; ++i) last = step();
  ts::cuda::synchronize();
  const ts::cuda::CachingAllocatorStats after = ts::cuda::caching_allocator_stats(0);
  CHECK(after.device_mallocs == warm.device_mallocs);
  CHECK(after.device_frees == warm.device_frees);
  CHECK(ts::memory_stats(device).current_bytes == held);  // nothing leaks from step to step
  CHECK(std::isfinite(last));
  CHECK(after.reserved_bytes >= ts::memory_stats(device).current_bytes);

  // empty_cache gives the unused blocks back; the next step allocates again.
  ts::cuda::empty_cache(0);
  CHECK(ts::cuda::caching_allocator_stats(0).cached_bytes == 0);
  step();
  CHECK(ts::cuda::caching_allocator_stats(0).device_mallocs > after.device_mallocs);
}

TEST_CASE("the device step matches the CPU step") {
  SmallNet cpu_net(ts::Device::cpu());
  SmallNet device_net(gpu_test::target());
  Tensor images = random_of(DType::f32, {16, 1, 28, 28}, 3).mul_(0.01);
  std::vector<int64_t> classes(16);
  for (int64_t i = 0; i < 16; ++i) classes[i] = (i * 3) % 10;
  Tensor targets = ts::tensor<int64_t>(classes);
  Tensor cpu_loss = cpu_net.loss(images, targets);
  Tensor device_loss = device_net.loss(images.to(gpu_test::target()), targets.to(gpu_test::target()));
  cpu_loss.backward();
  device_loss.backward();
  // The weight gradients are sums of ~10^4 terms of both signs through cuDNN's algorithms:
  // five times the float32 table tolerance.
  constexpr double kTolerance = 1e-4;
  std::string problem;
  CHECK(gpu_test::normalised_error(device_loss.cpu(), cpu_loss, problem) <= kTolerance);
  CHECK(gpu_test::normalised_error(device_net.conv_w.grad().cpu(), cpu_net.conv_w.grad(), problem) <= kTolerance);
  CHECK(gpu_test::normalised_error(device_net.fc_w.grad().cpu(), cpu_net.fc_w.grad(), problem) <= kTolerance);
}

TEST_CASE("Module::to moves parameters and gradients in place") {
  ts::nn::Sequential cpu_model, device_model;
  for (ts::nn::Sequential* model : {&cpu_model, &device_model}) {
    model->emplace<ts::nn::Linear>(8, 4);
    model->emplace<ts::nn::ReLU>();
    model->emplace<ts::nn::Linear>(4, 2);
    model->reset_parameters(7);
  }
  std::vector<Tensor> before = device_model.parameters();
  device_model.to(gpu_test::target());
  std::vector<Tensor> after = device_model.parameters();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].is_same(before[i]));  // identity kept: optimizers holding them still see them
    CHECK(after[i].device() == gpu_test::target());
  }
  Tensor input = random_of(DType::f32, {5, 8}, 13).mul_(0.01);
  Tensor expected = cpu_model(input);
  Tensor actual = device_model(input.to(gpu_test::target()));
  std::string problem;
  CHECK(gpu_test::normalised_error(actual.cpu(), expected, problem) <= gpu_test::tolerance(DType::f32));
  actual.sum().backward();
  CHECK(device_model.parameters()[0].grad().device() == gpu_test::target());
  device_model.to(ts::Device::cpu());
  CHECK(device_model.parameters()[0].device().is_cpu());
  CHECK(device_model.parameters()[0].grad().device().is_cpu());
}

TEST_CASE("an out-of-range target is the CPU's IndexError on the device too") {
  // On the device the kernel reports it and the next host wait (here item()) throws it, so
  // that the forward never waits for the device; on the CPU nll_loss throws at once.
  Tensor log_probs = ts::zeros({2, 3}, {.device = gpu_test::target()});
  Tensor targets = ts::tensor<int64_t>({0, 7, 9}).to(gpu_test::target()).narrow(0, 0, 2);
  std::string message = error_of([&] { ts::nll_loss(log_probs, targets).item<float>(); });
  CHECK(contains(message, "nll_loss: target 7 at position 1 is out of range for 3 classes"));
  CHECK_THROWS_AS(ts::nll_loss(log_probs, targets).item<float>(), ts::IndexError);
  // The first bad row is the one reported, as on the CPU, and it is reported once.
  Tensor several = ts::tensor<int64_t>({5, 1, -2, 8}).to(gpu_test::target());
  CHECK(contains(error_of([&] { ts::nll_loss(ts::zeros({4, 3}, {.device = gpu_test::target()}), several).item<float>(); }),
                 "target 5 at position 0 is out of range"));
  // The device is still usable afterwards.
  CHECK(ts::nll_loss(log_probs, ts::tensor<int64_t>({0, 2}).to(gpu_test::target())).item<float>() == 0.0f);
}

TEST_CASE("an embedding index out of range is the CPU's IndexError on the device too, forward and backward") {
  // Reported by the check kernel and thrown by the next host wait, with the CPU's message;
  // the first bad position across the launch's blocks (70000 indices: many blocks).
  const ts::Device device = gpu_test::target();
  Tensor weight = ts::zeros({5, 3}, {.device = device});
  std::vector<int64_t> values(70000, 1);
  values[60001] = 9;
  values[65000] = -1;
  Tensor indices = ts::tensor<int64_t>(values).view({7, 10000}).to(device);
  const std::string message = error_of([&] { ts::native::embedding(weight, indices).sum().item<float>(); });
  CHECK(contains(message, "embedding: index 9 at position 60001 of indices [7, 10000] is out of range for 5 embeddings"));
  CHECK_THROWS_AS(ts::native::embedding(weight, indices).sum().item<float>(), ts::IndexError);
  Tensor grad = ts::ones({7, 10000, 3}, {.device = device});
  CHECK(contains(error_of([&] { ts::native::embedding_backward(grad, indices, 5, -1, false).sum().item<float>(); }),
                 "embedding_backward: index 9 at position 60001"));
  // Nothing out of range was touched, and the device goes on.
  Tensor good = ts::tensor<int64_t>({0, 4, 2}).to(device);
  CHECK(ts::native::embedding(weight, good).sum().item<float>() == 0.0f);
}

TEST_CASE("an index out of range in index_select, index_add_, gather and scatter_add_ is the CPU's IndexError, raised late on the device") {
  // The device checks the indices in its kernels and the next host wait throws, naming the
  // op, the index and its position, as the CPU does at once; the calls themselves never
  // wait. Nothing is touched out of range, index_add_ adds nothing (the CPU checks first)
  // and scatter_add_ adds the indices in range (as the CPU does).
  const ts::Device device = gpu_test::target();
  const bool cuda = gpu_test::cuda_target();
  Tensor self = ts::arange(0, 20, 1, {.dtype = DType::f32}).view({5, 4}).to(device);
  Tensor index = ts::tensor<int64_t>({0, 7, 2, -1}).to(device);
  if (cuda) {
    const int64_t waits = ts::cuda::host_waits();
    Tensor selected = ts::native::index_select(self, 0, index);
    Tensor into = ts::zeros({5, 4}, {.device = device});
    ts::native::index_add_(into, 0, index, ts::ones({4, 4}, {.device = device}));
    Tensor gathered = ts::native::gather(self, 1, ts::tensor<int64_t>({0, 9}, {1, 2}).to(device));
    CHECK(ts::cuda::host_waits() == waits);  // queued, not waited for
    CHECK_THROWS_AS(ts::cuda::synchronize(0), ts::IndexError);  // the first report, once
    CHECK_NOTHROW(ts::cuda::synchronize(0));
  }
  CHECK(contains(error_of([&] { ts::native::index_select(self, 0, index).sum().item<float>(); }),
                 "index_select: index 7 at position 1 is out of range for dim 0 of size 5 (shape [5, 4])"));
  // The first bad position across the check's blocks (70000 indices: many blocks).
  std::vector<int64_t> many(70000, 1);
  many[60001] = 5;
  many[65000] = -3;
  Tensor long_index = ts::tensor<int64_t>(many).to(device);
  CHECK(contains(error_of([&] { ts::native::index_select(self, 0, long_index).sum().item<float>(); }),
                 "index_select: index 5 at position 60001 is out of range for dim 0 of size 5"));
  Tensor into = ts::zeros({5, 4}, {.device = device});
  CHECK(contains(error_of([&] {
                   ts::native::index_add_(into, 0, index, ts::ones({4, 4}, {.device = device}));
                   into.sum().item<float>();
                 }),
                 "index_add: index 7 at position 1 is out of range for dim 0 of size 5 (shape [5, 4])"));
  CHECK(into.sum().item<float>() == 0.0f);  // nothing added
  Tensor pick = ts::tensor<int64_t>({0, 3, 1, 2, 9, 0}, {2, 3}).to(device);
  CHECK(contains(error_of([&] { ts::native::gather(self, 1, pick).sum().item<float>(); }),
                 "gather: index 9 at [1, 1] of the index of shape [2, 3] is out of range for dim 1 of size 4 "
                 "(self of shape [5, 4])"));
  Tensor scattered = ts::zeros({3, 4}, {.device = device});
  CHECK(contains(error_of([&] {
                   ts::native::scatter_add_(scattered, 1, ts::tensor<int64_t>({0, 1, 9, 2}, {1, 4}).to(device),
                                            ts::ones({1, 4}, {.device = device}));
                   scattered.sum().item<float>();
                 }),
                 "scatter_add: index 9 at [0, 2] of the index of shape [1, 4] is out of range for dim 1 of size 4 "
                 "(self of shape [3, 4])"));
  CHECK(scattered.sum().item<float>() == 3.0f);  // the three in range were added
  // The device goes on.
  CHECK(ts::native::index_select(self, 0, ts::tensor<int64_t>({4, 0}).to(device)).sum().item<float>() == 70.0f + 6.0f);
}

TEST_CASE("mixing devices is a DeviceError naming both") {
  if (!gpu_test::cuda_target()) return;
  Tensor host = ts::ones({3, 3});
  Tensor device = ts::ones({3, 3}, {.device = ts::Device::cuda(0)});
  CHECK(contains(error_of([&] { host + device; }), "add: expected both tensors on one device, got cpu and cuda:0"));
  CHECK(contains(error_of([&] { device + host; }), "got cuda:0 and cpu"));
  CHECK_THROWS_AS(ts::matmul(device, host), ts::DeviceError);
  CHECK_THROWS_AS(ts::linear(device, device, ts::ones({3})), ts::DeviceError);
  CHECK_THROWS_AS(ts::conv2d(ts::ones({1, 3, 4, 4}, {.device = ts::Device::cuda(0)}), ts::ones({2, 3, 3, 3})),
                  ts::DeviceError);
  CHECK_THROWS_AS(ts::nll_loss(device, ts::tensor<int64_t>({0, 1, 2})), ts::DeviceError);
  CHECK_THROWS_AS(ts::where(ts::ones({3, 3}, {.dtype = DType::boolean}), device, device), ts::DeviceError);
}

#if TESSERA_HAS_CUDA

TEST_CASE("a training step waits on the host only to read its loss") {
  if (!gpu_test::cuda_target()) return;
  const ts::Device device = ts::Device::cuda(0);
  SmallNet net(device);
  std::vector<int64_t> classes(16);
  for (int64_t i = 0; i < 16; ++i) classes[i] = i % 10;
  Tensor host_images = random_of(DType::f32, {16, 1, 28, 28}, 3).mul_(0.01);
  Tensor host_targets = ts::tensor<int64_t>(classes);
  auto step = [&](bool read_loss) {
    Tensor images = host_images.to(device);  // copies from the host never wait for the device
    Tensor targets = host_targets.to(device);
    Tensor loss = net.loss(images, targets);  // nll_loss's target check does not wait either
    loss.backward();
    for (Tensor* p : {&net.conv_w, &net.conv_b, &net.fc_w, &net.fc_b}) {
      ts::NoGradGuard no_grad;
      p->sub_(p->grad(), 0.01);
      p->grad().zero_();
    }
    if (read_loss) loss.item<float>();
  };
  for (int i = 0; i < 3; ++i) step(true);  // warm-up (cuDNN's first runs, the caches)
  ts::cuda::synchronize();
  const int64_t before = ts::cuda::host_waits();
  for (int i = 0; i < 4; ++i) step(false);
  CHECK(ts::cuda::host_waits() == before);
  step(true);
  CHECK(ts::cuda::host_waits() == before + 1);
}

TEST_CASE("the caching allocator splits and merges blocks, so changing sizes reuse memory") {
  if (!gpu_test::cuda_target()) return;
  const ts::Device device = ts::Device::cuda(0);
  ts::cuda::empty_cache(0);  // what earlier tests left cached must not serve these requests
  { Tensor warm = ts::empty({6 << 20}, {.dtype = DType::u8, .device = device}); }  // one 20 MiB segment is cached
  const ts::cuda::CachingAllocatorStats before = ts::cuda::caching_allocator_stats(0);
  {
    Tensor a = ts::empty({3 << 20}, {.dtype = DType::u8, .device = device});  // both from the cached segment
    Tensor b = ts::empty({5 << 20}, {.dtype = DType::u8, .device = device});
  }
  {
    Tensor c = ts::empty({7 << 20}, {.dtype = DType::u8, .device = device});  // the freed blocks merged
  }
  CHECK(ts::cuda::caching_allocator_stats(0).device_mallocs == before.device_mallocs);
}

TEST_CASE("memory recorded as used by another stream is reused only once that stream is done") {
  if (!gpu_test::cuda_target()) return;
  const ts::Device device = ts::Device::cuda(0);
  // 43 MiB: a segment of its own, after the cache was emptied, so which block serves which
  // request is known. Both blocks are allocated and freed (cached) before the side stream is
  // held: cudaMalloc and cudaFree synchronise with every stream, so neither may run while a
  // stream waits for this thread (the suite deadlocked here).
  ts::cuda::empty_cache(0);
  constexpr int64_t kBytes = int64_t{43} << 20;
  {
    Tensor a = ts::empty({kBytes}, {.dtype = DType::u8, .device = device});
    Tensor b = ts::empty({kBytes}, {.dtype = DType::u8, .device = device});
  }
  ts::cuda::Stream side(0);
  const ts::cuda::CachingAllocatorStats cached = ts::cuda::caching_allocator_stats(0);
  // The side stream is held by a host function until the test lets it go: no timing involved.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto* hold = new std::shared_future<void>(released);
  TS_CUDA_CHECK(cudaLaunchHostFunc(
      side.handle(), [](void* future) { static_cast<std::shared_future<void>*>(future)->wait(); delete static_cast<std::shared_future<void>*>(future); },
      hold));
  void* first = nullptr;
  {
    Tensor used = ts::empty({kBytes}, {.dtype = DType::u8, .device = device});
    first = used.data_ptr();
    ts::cuda::record_stream(used, side.handle());
  }
  Tensor next = ts::empty({kBytes}, {.dtype = DType::u8, .device = device});
  CHECK(next.data_ptr() != first);  // still in use on the side stream: the other cached block
  const ts::cuda::CachingAllocatorStats held = ts::cuda::caching_allocator_stats(0);
  CHECK(held.device_mallocs == cached.device_mallocs);  // nothing reached cudaMalloc/cudaFree while held
  CHECK(held.device_frees == cached.device_frees);
  release.set_value();
  side.synchronize();
  Tensor again = ts::empty({kBytes}, {.dtype = DType::u8, .device = device});
  CHECK(again.data_ptr() == first);  // the side stream is done: the block is free again
}

TEST_CASE("the runtime reports the device and orders work with events") {
  if (!gpu_test::cuda_target()) return;
  CHECK(ts::cuda::is_available());
  CHECK(ts::cuda::device_count() >= 1);
  CHECK_FALSE(ts::cuda::device_name(0).empty());
  CHECK_THROWS_AS(ts::cuda::device_name(ts::cuda::device_count()), ts::DeviceError);

  Tensor big = ts::ones({4096, 4096}, {.device = ts::Device::cuda(0)});
  Tensor product = ts::matmul(big, big);  // queued, not finished
  ts::cuda::Event done(0);
  done.record(ts::cuda::compute_stream(0));
  ts::cuda::Stream side(0);
  done.block(side.handle());  // the side stream waits for the product on the device
  side.synchronize();
  CHECK(done.query());
  done.synchronize();
  CHECK(product.at<float>({17, 42}) == 4096.0f);
  ts::cuda::synchronize();
  ts::cuda::synchronize(0);
}

TEST_CASE("TF32 is off by default and can be turned on") {
  if (!gpu_test::cuda_target()) return;
  REQUIRE_FALSE(ts::cuda::allow_tf32());
  Tensor a = random_of(DType::f32, {256, 512}, 21).mul_(0.01);
  Tensor b = random_of(DType::f32, {512, 256}, 22).mul_(0.01);
  Tensor expected = ts::matmul(a, b);
  std::string problem;
  ts::cuda::set_allow_tf32(true);
  Tensor fast = ts::matmul(a.to(ts::Device::cuda(0)), b.to(ts::Device::cuda(0)));
  Tensor fast_conv = ts::conv2d(a.view({1, 1, 256, 512}).to(ts::Device::cuda(0)),
                                b.narrow(0, 0, 9).narrow(1, 0, 1).reshape({1, 1, 3, 3}).to(ts::Device::cuda(0)));
  ts::cuda::set_allow_tf32(false);
  // TF32 keeps 10 mantissa bits in the products: about 1e-3 relative, not 1e-6.
  CHECK(gpu_test::normalised_error(fast.cpu(), expected, problem) <= 5e-3);
  Tensor exact_conv = ts::conv2d(a.view({1, 1, 256, 512}), b.narrow(0, 0, 9).narrow(1, 0, 1).reshape({1, 1, 3, 3}));
  CHECK(gpu_test::normalised_error(fast_conv.cpu(), exact_conv, problem) <= 5e-3);
  Tensor exact = ts::matmul(a.to(ts::Device::cuda(0)), b.to(ts::Device::cuda(0)));
  CHECK(gpu_test::normalised_error(exact.cpu(), expected, problem) <= gpu_test::tolerance(DType::f32));
}

TEST_CASE("running out of device memory is a CudaError, and the device recovers") {
  if (!gpu_test::cuda_target()) return;
  // 2^45 float32 elements: 128 TiB, more than any GPU has.
  std::string message = error_of([] { ts::empty({int64_t{1} << 45}, {.device = ts::Device::cuda(0)}); });
  CHECK(contains(message, "cudaMalloc of "));
  CHECK(contains(message, "on cuda:0 failed"));
  CHECK_THROWS_AS(ts::empty({int64_t{1} << 45}, {.device = ts::Device::cuda(0)}), ts::cuda::CudaError);
  CHECK(ts::ones({4}, {.device = ts::Device::cuda(0)}).sum().item<float>() == 4.0f);
}

#endif
