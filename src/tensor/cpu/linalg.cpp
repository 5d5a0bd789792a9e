// matmul and linear on the CPU: batched GEMM over (broadcast) batch dims.
#include "tessera/tensor/cpu/gemm.h"
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/cpu/kernels.h"

namespace tessera::cpu {

using namespace native;

namespace {

// A 2-D view the GEMM can read without copying: row-major (stride [ld, 1]) or the
// transpose of one (stride [1, ld]). Anything else is copied first.
struct MatrixOperand {
  Tensor storage_owner;
  bool transposed = false;
  int64_t ld = 0;
};

MatrixOperand as_gemm_operand(const Tensor& matrix) {
  const int64_t rows = matrix.size(0), cols = matrix.size(1);
  const int64_t s0 = matrix.stride(0), s1 = matrix.stride(1);
  if ((s1 == 1 || cols == 1) && s0 >= std::max<int64_t>(cols, 1)) return {matrix, false, s0};
  if ((s0 == 1 || rows == 1) && s1 >= std::max<int64_t>(rows, 1)) return {matrix, true, s1};
  Tensor copy = contiguous(matrix);
  return {copy, false, std::max<int64_t>(cols, 1)};
}

template <class T>
void mm_into(const Tensor& a, const Tensor& b, Tensor& out, T beta) {
  MatrixOperand ma = as_gemm_operand(a), mb = as_gemm_operand(b);
  cpu::gemm<T>(ma.transposed, mb.transposed, a.size(0), b.size(1), a.size(1), T(1),
               static_cast<const T*>(ma.storage_owner.data_ptr()), ma.ld,
               static_cast<const T*>(mb.storage_owner.data_ptr()), mb.ld, beta, out.data_ptr<T>(),
               out.stride(0));
}

void check_matmul_operands(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "first operand");
  check_defined(b, op, "second operand");
  check_same_device(a, b, op);
  check_same_dtype(a, b, op);
  check_cpu(a, op);
  TS_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, op, ": both operands need at least one dimension, got ",
           shape_str(a.sizes()), " and ", shape_str(b.sizes()));
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  check_matmul_operands(a_in, b_in, "matmul");
  // Promote vectors to matrices and remember which dims to drop afterwards.
  Tensor a = a_in.dim() == 1 ? unsqueeze(a_in, 0) : a_in;
  Tensor b = b_in.dim() == 1 ? unsqueeze(b_in, 1) : b_in;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  TS_CHECK(b.size(-2) == k, ShapeError, "matmul: shapes ", shape_str(a_in.sizes()), " and ",
           shape_str(b_in.sizes()), " cannot be multiplied (", k, " != ", b.size(-2), ")");
  Shape batch_a(a.sizes().begin(), a.sizes().end() - 2), batch_b(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = empty(out_shape, a.dtype(), a.device());

  Shape a_shape = batch, b_shape = batch;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  Tensor a3 = expand(a, a_shape), b3 = expand(b, b_shape);
  const int64_t batches = shape_numel(batch);
  Tensor out3 = view(out, {batches, m, n});
  dispatch_floating(a.dtype(), "matmul", [&]<class T>() {
    if (batches == 1) {
      Tensor o = select(out3, 0, 0);
      mm_into<T>(view(contiguous(a3), {m, k}), view(contiguous(b3), {k, n}), o, T(0));
      return;
    }
    // Flatten batch dims (copying operands whose batch dims do not flatten).
    Tensor af = viewable(a3, {batches, m, k}) ? view(a3, {batches, m, k}) : view(contiguous(a3), {batches, m, k});
    Tensor bf = viewable(b3, {batches, k, n}) ? view(b3, {batches, k, n}) : view(contiguous(b3), {batches, k, n});
    for (int64_t i = 0; i < batches; ++i) {
      Tensor o = select(out3, 0, i);
      mm_into<T>(select(af, 0, i), select(bf, 0, i), o, T(0));
    }
  });
  if (a_in.dim() == 1 && b_in.dim() == 1) return view(out, {});
  if (a_in.dim() == 1) return squeeze(out, -2);
  if (b_in.dim() == 1) return squeeze(out, -1);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_matmul_operands(x, weight, "linear");
  TS_CHECK(weight.dim() == 2, ShapeError, "linear: weight must be 2-D [out_features, in_features], got ",
           shape_str(weight.sizes()));
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  TS_CHECK(x.size(-1) == in_features, ShapeError, "linear: input of shape ", shape_str(x.sizes()),
           " does not match weight of shape ", shape_str(weight.sizes()), " (", x.size(-1), " != ", in_features, ")");
  if (bias.defined()) {
    check_same_dtype(x, bias, "linear");
    TS_CHECK(bias.dim() == 1 && bias.size(0) == out_features, ShapeError, "linear: bias of shape ",
             shape_str(bias.sizes()), " does not match weight of shape ", shape_str(weight.sizes()));
  }
  const int64_t rows = x.numel() / std::max<int64_t>(in_features, 1);
  Shape out_shape = x.sizes();
  out_shape.back() = out_features;
  Tensor out = empty(out_shape, x.dtype(), x.device());
  Tensor x2 = contiguous(x);
  dispatch_floating(x.dtype(), "linear", [&]<class T>() {
    T* po = out.data_ptr<T>();
    T beta = T(0);
    if (bias.defined()) {  // start every row at the bias, then accumulate the product
      Tensor b = contiguous(bias);
      const T* pb = static_cast<const T*>(b.data_ptr());
      for (int64_t r = 0; r < rows; ++r) std::copy(pb, pb + out_features, po + r * out_features);
      beta = T(1);
    }
    MatrixOperand w = as_gemm_operand(weight);
    // out[rows, out] = x[rows, in] * W^T, W stored [out, in].
    cpu::gemm<T>(false, !w.transposed, rows, out_features, in_features, T(1), static_cast<const T*>(x2.data_ptr()),
                 in_features, static_cast<const T*>(w.storage_owner.data_ptr()), w.ld, beta, po, out_features);
  });
  return out;
}

}  // namespace tessera::cpu
