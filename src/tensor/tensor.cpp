#include "tessera/tensor/tensor.h"

#include <iomanip>
#include <ostream>
#include <sstream>
#include <cstring>

#include "tessera/tensor/native.h"

namespace tessera {

TensorImpl::TensorImpl() = default;
TensorImpl::~TensorImpl() = default;

void Tensor::check_defined(const char* what) const {
  TS_CHECK(impl_ != nullptr, ValueError, what, "() called on an undefined tensor");
}

const Shape& Tensor::sizes() const {
  check_defined("sizes");
  return impl_->sizes;
}

int64_t Tensor::size(int64_t dim) const { return sizes()[wrap_dim(dim, this->dim(), "size")]; }

int64_t Tensor::dim() const { return static_cast<int64_t>(sizes().size()); }

int64_t Tensor::numel() const { return shape_numel(sizes()); }

const Shape& Tensor::strides() const {
  check_defined("strides");
  return impl_->strides;
}

int64_t Tensor::stride(int64_t dim) const { return strides()[wrap_dim(dim, this->dim(), "stride")]; }

int64_t Tensor::storage_offset() const {
  check_defined("storage_offset");
  return impl_->offset;
}

DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}

Device Tensor::device() const {
  check_defined("device");
  return impl_->storage->device();
}

bool Tensor::is_contiguous() const {
  const Shape& shape = sizes();
  if (numel() == 0) return true;  // as in PyTorch: no element is out of place
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

const std::shared_ptr<Storage>& Tensor::storage() const {
  check_defined("storage");
  return impl_->storage;
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return detail::concat("Tensor", shape_str(sizes()), " ", dtype_name(dtype()), " ", device().str());
}

void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  auto* base = static_cast<char*>(impl_->storage->data());
  TS_CHECK(base != nullptr || numel() == 0, ValueError, "data_ptr(): ", str(), " has no memory",
           impl_->storage->released_note().empty() ? " (its storage was released, e.g. an FSDP parameter outside its unit)"
                                                   : ": " + impl_->storage->released_note());
  return base + impl_->offset * static_cast<int64_t>(element_size());
}

bool Tensor::is_pinned() const { return defined() && impl_->storage->pinned(); }

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->sizes = impl_->sizes;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

void Tensor::set_data(const Tensor& data) {
  check_defined("set_data");
  TS_CHECK(data.defined(), ValueError, "set_data: the new data is an undefined tensor");
  impl_->storage = data.impl_->storage;
  impl_->sizes = data.impl_->sizes;
  impl_->strides = data.impl_->strides;
  impl_->offset = data.impl_->offset;
  impl_->dtype = data.impl_->dtype;
}

namespace detail {

void read_elements(const Tensor& tensor, void* out, DType out_dtype) {
  Tensor host = tensor.detach();
  if (host.is_cuda()) host = native::to_device(host, Device::cpu());
  Tensor destination = native::empty(host.sizes(), out_dtype, Device::cpu());
  native::copy_(destination, host);
  // memcpy with a null pointer is undefined even for 0 bytes (an empty vector's data()).
  if (destination.nbytes() > 0) std::memcpy(out, destination.data_ptr(), destination.nbytes());
}

}  // namespace detail

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  out << tensor.str();
  if (!tensor.defined() || tensor.numel() > 1000) return out;
  std::vector<double> values = tensor.to_vector<double>();
  const Shape& shape = tensor.sizes();
  int64_t row = shape.empty() ? 1 : shape.back();
  out << "\n";
  std::ostringstream body;
  body << std::setprecision(6);
  for (size_t i = 0; i < values.size(); ++i) {
    if (tensor.dtype() == DType::boolean) body << (values[i] != 0 ? "True" : "False");  // as PyTorch prints
    else body << values[i];
    if (i + 1 < values.size()) body << ((static_cast<int64_t>(i + 1) % std::max<int64_t>(row, 1) == 0) ? "\n" : " ");
  }
  return out << body.str();
}

}  // namespace tessera
