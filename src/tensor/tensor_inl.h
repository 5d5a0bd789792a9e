// Template members of Tensor.
#pragma once

#include "tessera/tensor/error.h"

namespace tessera {

namespace detail {
// Reads element `flat_index` (row-major) of `tensor` from host memory as T.
void read_elements(const Tensor& tensor, void* out, DType out_dtype);
}  // namespace detail

template <class T>
T* Tensor::data_ptr() const {
  TS_CHECK(dtype() == dtype_of<T>, DTypeError, "data_ptr<", dtype_name(dtype_of<T>), ">() called on a ",
           dtype_name(dtype()), " tensor");
  return static_cast<T*>(data_ptr());
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  check_defined("to_vector");
  if constexpr (std::is_same_v<T, bool>) {
    // std::vector<bool> packs bits: read bools as bytes, then copy them in.
    std::vector<uint8_t> bytes(static_cast<size_t>(numel()));
    detail::read_elements(*this, bytes.data(), DType::boolean);
    return std::vector<bool>(bytes.begin(), bytes.end());
  } else {
    std::vector<T> values(static_cast<size_t>(numel()));
    detail::read_elements(*this, values.data(), dtype_of<T>);
    return values;
  }
}

template <class T>
T Tensor::item() const {
  TS_CHECK(numel() == 1, ValueError, "item() needs a one-element tensor, got shape ", shape_str(sizes()));
  return to_vector<T>()[0];
}

template <class T>
T Tensor::at(std::initializer_list<int64_t> index) const {
  TS_CHECK(static_cast<int64_t>(index.size()) == dim(), IndexError, "at(): ", index.size(),
           " indices for a tensor of shape ", shape_str(sizes()));
  Tensor element = *this;
  int64_t d = 0;
  for (int64_t i : index) element = element.detach().select(0, i), ++d;
  return element.template item<T>();
}

}  // namespace tessera
