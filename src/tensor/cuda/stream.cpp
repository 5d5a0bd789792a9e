#include "tessera/tensor/cuda/stream.h"

#include <array>
#include <atomic>
#include <mutex>

#include "tessera/tensor/cuda/cuda_runtime.h"

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

void synchronize_device(int device) { TS_CUDA_CHECK(cudaStreamSynchronize(compute_stream(device))); }

void synchronize_used_devices() {
  ComputeStreams& all = compute_streams();
  for (int device = 0; device < kMaxDevices; ++device) {
    cudaStream_t stream = all.streams[device].load(std::memory_order_acquire);
    if (stream != nullptr) TS_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device);
  TS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);  // queued work still completes
}

void Stream::synchronize() const { TS_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Event::Event(int device) : device_(device) {
  DeviceGuard guard(device);
  TS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) {
  DeviceGuard guard(device_);
  TS_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::block(cudaStream_t stream) const { TS_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }

void Event::synchronize() const { TS_CUDA_CHECK(cudaEventSynchronize(event_)); }

bool Event::query() const {
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is an answer, not an error
    return false;
  }
  TS_CUDA_CHECK(status);
  return true;
}

}  // namespace tessera::cuda
