// matmul and linear on the CPU: batched GEMM over (broadcast) batch dims. bfloat16 sums in
// float32 and rounds each result once (gemm<BFloat16>, bf16_gemm.h), as PyTorch's CPU does.
#include "tessera/tensor/cpu/gemm.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

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

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  MatmulPlan plan = plan_matmul(a_in, b_in);
  check_cpu(a_in, "matmul");
  const int64_t batches = plan.batches, m = plan.m, k = plan.k, n = plan.n;
  Tensor out3 = view(plan.out, {batches, m, n});
  dispatch_gemm(a_in.dtype(), "matmul", [&]<class T>() {
    if (batches == 1) {
      Tensor o = select(out3, 0, 0);
      // The operands as they are where they view as matrices (a transpose included: the
      // GEMM reads it in place instead of a copy, e.g. linear's weight gradient g^T x).
      auto matrix = [](const Tensor& t, int64_t rows, int64_t cols) {
        return viewable(t, {rows, cols}) ? view(t, {rows, cols}) : view(contiguous(t), {rows, cols});
      };
      mm_into<T>(matrix(plan.a3, m, k), matrix(plan.b3, k, n), o, T(0));
      return;
    }
    // Flatten batch dims (copying operands whose batch dims do not flatten).
    const Tensor& a3 = plan.a3;
    const Tensor& b3 = plan.b3;
    Tensor af = viewable(a3, {batches, m, k}) ? view(a3, {batches, m, k}) : view(contiguous(a3), {batches, m, k});
    Tensor bf = viewable(b3, {batches, k, n}) ? view(b3, {batches, k, n}) : view(contiguous(b3), {batches, k, n});
    for (int64_t i = 0; i < batches; ++i) {
      Tensor o = select(out3, 0, i);
      mm_into<T>(select(af, 0, i), select(bf, 0, i), o, T(0));
    }
  });
  return plan.result();
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Shape out_shape = linear_shape(x, weight, bias);
  check_cpu(x, "linear");
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  const int64_t rows = x.numel() / std::max<int64_t>(in_features, 1);
  Tensor out = empty(out_shape, x.dtype(), x.device());
  Tensor x2 = contiguous(x);
  dispatch_gemm(x.dtype(), "linear", [&]<class T>() {
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
