// Tensor: a value-semantic handle to a strided view of shared storage.
//
// Copying a Tensor copies the handle (both refer to the same TensorImpl, as in PyTorch);
// views (view, reshape, narrow, transpose, ...) are new TensorImpls over the same Storage;
// contiguous() and clone() copy the data. Row-major, NCHW for images. Operations dispatch
// on their operands' device; there is no global mode.
//
//   ts::Tensor x = ts::randn({2, 3}, gen).requires_grad_();
//   ts::Tensor loss = (x * x).sum();
//   loss.backward();            // x.grad() == 2 * x
#pragma once

#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/tensor/device.h"
#include "tessera/tensor/dtype.h"
#include "tessera/tensor/shape.h"
#include "tessera/tensor/storage.h"

namespace tessera {

class Tensor;
class Generator;
namespace autograd {
class Node;
}  // namespace autograd

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

// What autograd keeps on a tensor (its gradient, grad_fn, hooks). The autograd layer
// defines it (autograd/meta.h); tensor/ only owns it, so that it depends on nothing above
// it (PyTorch's AutogradMetaInterface).
struct AutogradMetaInterface {
  virtual ~AutogradMetaInterface() = default;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::unique_ptr<AutogradMetaInterface> autograd;  // null until autograd needs it

  TensorImpl();
  ~TensorImpl();
};

// A hook on a gradient: returns a replacement gradient, or an undefined Tensor to keep it.
using GradHook = std::function<Tensor(const Tensor& grad)>;
// Runs after a leaf's .grad has been accumulated (FSDP reduce-scatters from here).
using PostAccumulateGradHook = std::function<void(Tensor& leaf)>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Metadata.
  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const;
  const Shape& shape() const { return sizes(); }
  int64_t size(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  const Shape& strides() const;
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const;
  DType dtype() const;
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  bool is_contiguous() const;
  size_t element_size() const { return tessera::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  const std::shared_ptr<Storage>& storage() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  // "Tensor[2, 3] float32 cpu"
  std::string str() const;

  // Data. data_ptr() points at element 0 of this view (offset applied); a deferred
  // storage is materialised first. The typed form checks the dtype.
  void* data_ptr() const;
  template <class T> T* data_ptr() const;
  // The single value of a one-element tensor, converted to T (copied from the device).
  template <class T> T item() const;
  // All elements in row-major order, converted to T (copied from the device).
  template <class T> std::vector<T> to_vector() const;
  // One element, converted to T: t.at<float>({1, 2}).
  template <class T> T at(std::initializer_list<int64_t> index) const;

  // Conversions and copies; recorded by autograd.
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor cpu() const { return to(Device::cpu()); }
  // A copy in pinned (page-locked) host memory, which the device copies to and from
  // directly (allocator.h: pinned_host_allocator); this tensor when it is pinned already.
  // Host tensors only, as torch.Tensor.pin_memory().
  Tensor pin_memory() const;
  bool is_pinned() const;
  Tensor contiguous() const;
  Tensor clone() const;
  // Shares storage, never requires grad.
  Tensor detach() const;
  // Makes this tensor refer to `data`'s storage, shape, strides and dtype while keeping
  // its identity and autograd state (PyTorch's `x.data = data`). Every handle to this
  // tensor sees the change; Module::to and FSDP rely on that.
  void set_data(const Tensor& data);

  // In-place updates; not recorded by autograd (an error on a tensor that requires grad
  // while grad mode is on, as in PyTorch). `src`/`other` broadcast to this shape.
  Tensor& copy_(const Tensor& src);
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value);

  // Views; recorded by autograd.
  Tensor view(const Shape& shape) const;  // one dim may be -1
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const Shape& dims) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a dim

  // Math; recorded by autograd.
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor erf() const;
  Tensor clamp(std::optional<double> min, std::optional<double> max = std::nullopt) const;
  Tensor clamp_min(double min) const;
  Tensor clamp_max(double max) const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor pow(double exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor max() const;
  // Values and indices along `dim`, as torch.max(dim).
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  Tensor amax(const Shape& dims, bool keepdim = false) const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor amin(const Shape& dims, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor var(const Shape& dims = {}, double correction = 1, bool keepdim = false) const;
  Tensor std(const Shape& dims = {}, double correction = 1, bool keepdim = false) const;
  Tensor logsumexp(const Shape& dims, bool keepdim = false) const;
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // Masks, indexing, selection and scans; recorded by autograd where differentiable
  // (functions.h says what each does).
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& split_sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor cumsum(int64_t dim) const;
  Tensor multinomial(int64_t num_samples, bool replacement, Generator& generator) const;
  Tensor multinomial(int64_t num_samples, bool replacement = false) const;  // the default generator
  Tensor logical_not() const;
  Tensor logical_and(const Tensor& other) const;
  Tensor logical_or(const Tensor& other) const;
  Tensor logical_xor(const Tensor& other) const;

  // Autograd.
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);
  // The accumulated gradient of a leaf (undefined until a backward reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  // Backpropagates from this tensor; `gradient` may be omitted for a one-element tensor.
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;
  std::shared_ptr<autograd::Node> grad_fn() const;
  bool is_leaf() const;
  // Registers a hook on this tensor's gradient; returns a handle for remove_hook.
  int register_hook(GradHook hook);
  void remove_hook(int handle);
  void register_post_accumulate_grad_hook(PostAccumulateGradHook hook);

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

// Element-wise arithmetic with broadcasting, and scalar forms.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);
// Comparisons give bool tensors (DType::boolean), with broadcasting; a scalar side is
// converted to the tensor's dtype first (x > 0.5, mask == 0 on an integer tensor).
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
// Masks: ~, &, | and ^ are logical_not/and/or/xor on bool tensors (as in PyTorch; the
// bitwise forms for integers are not implemented and throw).
Tensor operator~(const Tensor& a);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);

// Prints shape, dtype, device and (for up to 1000 elements) the values.
std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

}  // namespace tessera

#include "tessera/tensor/tensor_inl.h"
