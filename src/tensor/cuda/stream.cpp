#include "tessera/tensor/cuda/stream.h"

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_errors.h"

namespace tessera::cuda {

namespace {

// One slot per possible device index; cudaStream_t is a pointer, published once.
constexpr int kMaxDevices = 64;

struct ComputeStreams {
  std::mutex creation;
  std::array<std::atomic<cudaStream_t>, kMaxDevices> streams{};
};

ComputeStreams& compute_streams() {
  static auto* streams = new ComputeStreams();  // never destroyed: see compute_stream()
  return *streams;
}

// Events are created once and reused: cudaEventCreate/Destroy per collective or per freed
// block would cost more than the work they order. A returned event may still be pending;
// re-recording it later is fine, as every wait on it has already captured its state.
struct EventPools {
  std::mutex mutex;
  std::array<std::vector<cudaEvent_t>, kMaxDevices> free{};
};

EventPools& event_pools() {
  static auto* pools = new EventPools();  // never destroyed, as the streams
  return *pools;
}

cudaEvent_t take_event(int device) {
  EventPools& pools = event_pools();
  {
    std::lock_guard<std::mutex> lock(pools.mutex);
    auto& free = pools.free[static_cast<size_t>(device)];
    if (!free.empty()) {
      cudaEvent_t event = free.back();
      free.pop_back();
      return event;
    }
  }
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  TS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

void give_back_event(int device, cudaEvent_t event) {
  EventPools& pools = event_pools();
  std::lock_guard<std::mutex> lock(pools.mutex);
  pools.free[static_cast<size_t>(device)].push_back(event);
}

}  // namespace

cudaStream_t compute_stream(int device) {
  check_device_index(device);
  TS_CHECK(device < kMaxDevices, DeviceError, "cuda:", device, ": Tessera supports at most ", kMaxDevices,
           " devices per process");
  ComputeStreams& all = compute_streams();
  cudaStream_t stream = all.streams[device].load(std::memory_order_acquire);
  if (stream != nullptr) return stream;
  std::lock_guard<std::mutex> lock(all.creation);
  stream = all.streams[device].load(std::memory_order_acquire);
  if (stream == nullptr) {
    DeviceGuard guard(device);
    TS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    all.streams[device].store(stream, std::memory_order_release);
  }
  return stream;
}

namespace {
std::atomic<int64_t> host_wait_count{0};
}  // namespace

void wait_for_stream(cudaStream_t stream, int device) {
  host_wait_count.fetch_add(1, std::memory_order_relaxed);
  TS_CUDA_CHECK(cudaStreamSynchronize(stream));
  raise_device_errors(device);
}

void wait_for_event(cudaEvent_t event, int device) {
  host_wait_count.fetch_add(1, std::memory_order_relaxed);
  TS_CUDA_CHECK(cudaEventSynchronize(event));
  raise_device_errors(device);
}

int64_t host_waits() { return host_wait_count.load(std::memory_order_relaxed); }

void synchronize_device(int device) { wait_for_stream(compute_stream(device), device); }

void synchronize_used_devices() {
  ComputeStreams& all = compute_streams();
  for (int device = 0; device < kMaxDevices; ++device) {
    cudaStream_t stream = all.streams[device].load(std::memory_order_acquire);
    if (stream != nullptr) wait_for_stream(stream, device);
  }
}

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device);
  TS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);  // queued work still completes
}

void Stream::synchronize() const { wait_for_stream(stream_, device_); }

Event::Event(int device) : device_(device) {
  check_device_index(device);
  TS_CHECK(device < kMaxDevices, DeviceError, "cuda:", device, ": Tessera supports at most ", kMaxDevices,
           " devices per process");
  event_ = take_event(device);
}

Event::~Event() {
  if (event_ != nullptr) give_back_event(device_, event_);
}

void Event::record(cudaStream_t stream) {
  DeviceGuard guard(device_);
  TS_CUDA_CHECK(cudaEventRecord(event_, stream));
  recorded_ = true;
}

void Event::block(cudaStream_t stream) const {
  if (recorded_) TS_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void Event::synchronize() const {
  if (recorded_) wait_for_event(event_, device_);
}

bool Event::query() const {
  if (!recorded_) return true;  // (a reused event may still carry its last owner's recording)
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is an answer, not an error
    return false;
  }
  TS_CUDA_CHECK(status);
  return true;
}

}  // namespace tessera::cuda
