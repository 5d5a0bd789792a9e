// Streams and events on a CUDA device.
//
// Every kernel, cuBLAS and cuDNN call and copy that Tessera issues for device d goes to
// d's compute stream: created on first use, non-blocking (it never waits for the legacy
// default stream, which Tessera does not use). Work on one stream runs in issue order;
// that is what lets the caching allocator hand a block freed by the host to the next op
// at once, without waiting for the kernels that used it.
//
// Other streams (the NCCL process group's, a copy stream) order themselves against the
// compute stream with events, and must not let the allocator reuse a tensor's block while
// they still read it (keep the tensor alive until an event recorded after the last use
// has been waited on):
//
//   cuda::Stream comm(device);
//   cuda::Event produced(device);
//   produced.record(cuda::compute_stream(device));   // after the gradient kernels
//   produced.block(comm.handle());                   // the collective starts after them
//   ... ncclAllReduce(..., comm.handle()) ...
//   cuda::Event reduced(device);
//   reduced.record(comm.handle());
//   reduced.block(cuda::compute_stream(device));     // the optimizer waits for the result
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// The compute stream of `device`, created on first use. Streams live until the process
// exits (destroying them at static destruction would race the CUDA runtime's teardown).
cudaStream_t compute_stream(int device);

// A stream owned by its creator, for work beside the compute stream.
class Stream {
 public:
  explicit Stream(int device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t handle() const { return stream_; }
  int device() const { return device_; }
  // Waits on the host until all work queued so far has finished.
  void synchronize() const;

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

// A point in a stream's work. Timing is disabled: these are for ordering only. The CUDA
// events behind them are pooled per device and reused, never created per use.
class Event {
 public:
  explicit Event(int device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the work queued on `stream` so far (the stream must be on this event's device).
  void record(cudaStream_t stream);
  // Makes `stream` (any device) wait, on the device, for the recorded work; the host goes on.
  void block(cudaStream_t stream) const;
  // Waits on the host for the recorded work; returns at once if nothing was recorded.
  void synchronize() const;
  // True when the recorded work has finished (or nothing was recorded).
  bool query() const;
  int device() const { return device_; }
  cudaEvent_t handle() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
  bool recorded_ = false;
};

// Waits for `device`'s compute stream.
void synchronize_device(int device);
// Waits for the compute stream of every device that has one.
void synchronize_used_devices();

// Every host wait Tessera does goes through these: they wait, then raise what the device
// reported meanwhile (device_errors.h: a kernel's bad-input record, a watchdog's error).
void wait_for_stream(cudaStream_t stream, int device);
void wait_for_event(cudaEvent_t event, int device);
// How many host waits Tessera has done in this process (tests check that a training step
// waits only where it reads a result).
int64_t host_waits();

}  // namespace tessera::cuda
