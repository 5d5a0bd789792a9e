// One table of op cases, each checked in f64 against central differences. Every backward
// node the library records (found by scanning src/autograd/functions) must be reached by
// some case, so a new differentiable op cannot skip its gradient check.
#include <doctest/doctest.h>

#include "support/backward_nodes.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <tessera/tessera.h>

namespace ts = tessera;
using ts::DType;
using ts::Shape;
using ts::Tensor;
using TensorList = std::vector<Tensor>;

namespace {

// A f64 leaf with values uniform in [low, high). `transposed` makes it non-contiguous:
// the values live in a [.., w, h] tensor and the leaf is its transpose.
Tensor leaf(const Shape& shape, uint64_t seed, double low = -1, double high = 1, bool transposed = false) {
  ts::Generator gen(seed);
  Tensor t;
  if (transposed && shape.size() >= 2) {
    Shape swapped = shape;
    std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
    t = (ts::rand(swapped, gen, {.dtype = DType::f64}) * (high - low) + low).transpose(-1, -2);
    REQUIRE_FALSE(t.is_contiguous());
  } else {
    t = ts::rand(shape, gen, {.dtype = DType::f64}) * (high - low) + low;
  }
  return t.detach().requires_grad_();
}

// Values bounded away from zero (for relu, abs, max ties).
Tensor leaf_away_from_zero(const Shape& shape, uint64_t seed, bool transposed = false) {
  Tensor magnitude = leaf(shape, seed, 0.1, 1.0, transposed).detach();
  Tensor sign = leaf(shape, seed + 1000, -1, 1, transposed).detach();
  Tensor out = ts::where(sign > ts::zeros({}, {.dtype = DType::f64}), magnitude, -magnitude);
  return out.detach().requires_grad_();
}

Tensor labels(const std::vector<int64_t>& values) { return ts::tensor<int64_t>(values); }

struct OpCase {
  std::string name;
  std::function<TensorList()> inputs;
  std::function<Tensor(const TensorList&)> f;
};

std::vector<OpCase> op_cases() {
  using L = const TensorList&;
  std::vector<OpCase> cases = {
      // Element-wise, with broadcasting and non-contiguous operands.
      {"add broadcast", [] { return TensorList{leaf({2, 3}, 1), leaf({3}, 2)}; }, [](L x) { return x[0] + x[1]; }},
      {"sub broadcast column", [] { return TensorList{leaf({3, 1}, 3), leaf({3, 4}, 4, -1, 1, true)}; },
       [](L x) { return x[0] - x[1]; }},
      {"mul non-contiguous", [] { return TensorList{leaf({3, 4}, 5, -1, 1, true), leaf({4}, 6)}; },
       [](L x) { return x[0] * x[1]; }},
      {"div", [] { return TensorList{leaf({2, 3}, 7), leaf({2, 1}, 8, 0.5, 2)}; }, [](L x) { return x[0] / x[1]; }},
      {"pow tensor", [] { return TensorList{leaf({4}, 9, 0.5, 2), leaf({4}, 10)}; },
       [](L x) { return ts::pow(x[0], x[1]); }},
      {"pow scalar", [] { return TensorList{leaf({2, 3}, 11, 0.5, 2, true)}; }, [](L x) { return x[0].pow(2.5); }},
      {"maximum", [] { return TensorList{leaf({3, 3}, 12), leaf({3}, 13)}; }, [](L x) { return ts::maximum(x[0], x[1]); }},
      {"minimum", [] { return TensorList{leaf({3, 3}, 14), leaf({3, 1}, 15)}; }, [](L x) { return ts::minimum(x[0], x[1]); }},
      {"neg", [] { return TensorList{leaf({5}, 16)}; }, [](L x) { return -x[0]; }},
      {"abs", [] { return TensorList{leaf_away_from_zero({2, 4}, 17, true)}; }, [](L x) { return x[0].abs(); }},
      {"exp", [] { return TensorList{leaf({2, 3}, 18)}; }, [](L x) { return x[0].exp(); }},
      {"log", [] { return TensorList{leaf({2, 3}, 19, 0.5, 3)}; }, [](L x) { return x[0].log(); }},
      {"sqrt", [] { return TensorList{leaf({2, 3}, 20, 0.5, 3, true)}; }, [](L x) { return x[0].sqrt(); }},
      {"relu", [] { return TensorList{leaf_away_from_zero({3, 4}, 21)}; }, [](L x) { return ts::relu(x[0]); }},
      {"sigmoid", [] { return TensorList{leaf({6}, 22, -3, 3)}; }, [](L x) { return ts::sigmoid(x[0]); }},
      {"tanh", [] { return TensorList{leaf({6}, 23, -2, 2)}; }, [](L x) { return ts::tanh(x[0]); }},
      {"where", [] { return TensorList{leaf({2, 3}, 24), leaf({3}, 25)}; },
       [](L x) { return ts::where(ts::tensor<bool>({true, false, true, false, false, true}, {2, 3}), x[0], x[1]); }},
      {"scalar forms", [] { return TensorList{leaf({4}, 26, 0.5, 2)}; },
       [](L x) { return (x[0] + 1.5) * 2.0 - 0.5 + (3.0 / x[0]) + x[0] / 4.0 + (1.0 - x[0]); }},
      // Reductions.
      {"sum all", [] { return TensorList{leaf({2, 3}, 27, -1, 1, true)}; }, [](L x) { return x[0].sum(); }},
      {"sum dims keepdim", [] { return TensorList{leaf({2, 3, 4}, 28)}; }, [](L x) { return x[0].sum({0, 2}, true); }},
      {"mean dim", [] { return TensorList{leaf({3, 4}, 29, -1, 1, true)}; }, [](L x) { return x[0].mean({1}); }},
      {"amax", [] { return TensorList{leaf({3, 5}, 30)}; }, [](L x) { return x[0].amax({1}); }},
      {"max dim", [] { return TensorList{leaf({4, 3}, 31, -1, 1, true)}; }, [](L x) { return std::get<0>(x[0].max(0)); }},
      // Linear algebra.
      {"matmul 2-D", [] { return TensorList{leaf({3, 4}, 32), leaf({4, 2}, 33, -1, 1, true)}; },
       [](L x) { return ts::matmul(x[0], x[1]); }},
      {"matmul batched broadcast", [] { return TensorList{leaf({2, 3, 4}, 34), leaf({4, 5}, 35)}; },
       [](L x) { return ts::matmul(x[0], x[1]); }},
      {"matmul vectors", [] { return TensorList{leaf({4}, 36), leaf({4, 3}, 37), leaf({3}, 38)}; },
       [](L x) { return ts::matmul(ts::matmul(x[0], x[1]), x[2]); }},
      {"linear", [] { return TensorList{leaf({2, 3, 4}, 39), leaf({5, 4}, 40), leaf({5}, 41)}; },
       [](L x) { return ts::linear(x[0], x[1], x[2]); }},
      {"linear no bias, transposed weight", [] { return TensorList{leaf({3, 4}, 42), leaf({5, 4}, 43, -1, 1, true)}; },
       [](L x) { return ts::linear(x[0], x[1]); }},
      // Convolution and pooling.
      {"conv2d", [] { return TensorList{leaf({2, 3, 6, 5}, 44), leaf({4, 3, 3, 3}, 45), leaf({4}, 46)}; },
       [](L x) { return ts::conv2d(x[0], x[1], x[2]); }},
      {"conv2d stride padding dilation", [] { return TensorList{leaf({1, 2, 7, 7}, 47), leaf({3, 2, 3, 2}, 48)}; },
       [](L x) { return ts::conv2d(x[0], x[1], {}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}}); }},
      {"max_pool2d", [] { return TensorList{leaf({2, 2, 6, 6}, 49)}; }, [](L x) { return ts::max_pool2d(x[0], 2); }},
      {"max_pool2d stride padding", [] { return TensorList{leaf({1, 2, 7, 5}, 50)}; },
       [](L x) { return ts::max_pool2d(x[0], 3, ts::Size2(2), 1); }},
      {"adaptive_avg_pool2d to 1x1", [] { return TensorList{leaf({2, 3, 4, 5}, 69)}; },
       [](L x) { return ts::adaptive_avg_pool2d(x[0], 1); }},
      {"adaptive_avg_pool2d overlapping bins, non-contiguous", [] { return TensorList{leaf({1, 2, 5, 7}, 70, -1, 1, true)}; },
       [](L x) { return ts::adaptive_avg_pool2d(x[0], {3, 4}); }},
      // Batch norm: the running statistics are buffers (no gradient); in training the
      // output depends on them not at all, in eval only through constants.
      {"batch_norm train", [] { return TensorList{leaf({3, 2, 2, 3}, 71), leaf({2}, 72, 0.5, 1.5), leaf({2}, 73)}; },
       [](L x) {
         Tensor mean = ts::zeros({2}, {.dtype = DType::f64}), var = ts::ones({2}, {.dtype = DType::f64});
         return ts::batch_norm(x[0], mean, var, x[1], x[2], true, 0.1, 1e-5);
       }},
      {"batch_norm train without affine or running stats, 2-D", [] { return TensorList{leaf({5, 3}, 74)}; },
       [](L x) { return ts::batch_norm(x[0], {}, {}, {}, {}, true); }},
      {"batch_norm eval", [] { return TensorList{leaf({2, 3, 2, 2}, 75, -1, 1, true), leaf({3}, 76, 0.5, 1.5), leaf({3}, 77)}; },
       [](L x) {
         Tensor mean = ts::tensor<double>({0.1, -0.2, 0.3}), var = ts::tensor<double>({0.5, 1.5, 2.0});
         return ts::batch_norm(x[0], mean, var, x[1], x[2], false, 0.1, 1e-5);
       }},
      // Softmax family and losses.
      {"softmax", [] { return TensorList{leaf({3, 5}, 51, -2, 2, true)}; }, [](L x) { return ts::softmax(x[0], 1); }},
      {"log_softmax dim 0", [] { return TensorList{leaf({4, 3}, 52, -2, 2)}; }, [](L x) { return ts::log_softmax(x[0], 0); }},
      {"nll_loss mean", [] { return TensorList{leaf({4, 3}, 53)}; },
       [](L x) { return ts::nll_loss(x[0], labels({0, 2, 1, 2})); }},
      {"nll_loss weighted, ignore_index", [] { return TensorList{leaf({4, 3}, 54)}; },
       [](L x) {
         return ts::nll_loss(x[0], labels({0, 2, -100, 1}), {.weight = ts::tensor<double>({0.2, 1.0, 3.0})});
       }},
      {"nll_loss none", [] { return TensorList{leaf({3, 4}, 55)}; },
       [](L x) { return ts::nll_loss(x[0], labels({3, 0, 1}), {.reduction = ts::Reduction::none}); }},
      {"nll_loss sum", [] { return TensorList{leaf({3, 4}, 56)}; },
       [](L x) { return ts::nll_loss(x[0], labels({3, 0, 1}), {.reduction = ts::Reduction::sum}); }},
      {"cross_entropy", [] { return TensorList{leaf({5, 4}, 57, -2, 2)}; },
       [](L x) { return ts::cross_entropy(x[0], labels({0, 1, 2, 3, 0})); }},
      // Without label smoothing cross_entropy is one fused node: each of its options.
      {"cross_entropy weighted, ignore_index", [] { return TensorList{leaf({5, 4}, 59, -2, 2)}; },
       [](L x) {
         return ts::cross_entropy(x[0], labels({0, 2, 1, 3, 2}),
                                  {.weight = ts::tensor<double>({0.5, 1.0, 2.0, 1.5}), .ignore_index = 1});
       }},
      {"cross_entropy [N, C, d] sum and none", [] { return TensorList{leaf({2, 3, 4}, 60, -2, 2)}; },
       [](L x) {
         Tensor t = ts::tensor<int64_t>({0, 2, 1, -100, 2, 2, 0, 1}, {2, 4});
         return ts::cross_entropy(x[0], t, {.reduction = ts::Reduction::sum}) +
                (ts::cross_entropy(x[0], t, {.reduction = ts::Reduction::none}) * ts::arange(4, {.dtype = DType::f64}))
                    .sum();
       }},
      {"cross_entropy of one score vector [C]", [] { return TensorList{leaf({5}, 61, -2, 2)}; },
       [](L x) { return ts::cross_entropy(x[0], ts::full({}, 2, {.dtype = DType::i64})); }},
      {"dropout", [] { return TensorList{leaf({4, 6}, 58)}; },
       [](L x) { return ts::dropout(x[0], 0.3, true, {.seed = 1, .stream = 2, .step = 3}); }},
      // Transformer layers. Embedding's padding_idx and scale_grad_by_freq change the
      // gradient on purpose (no longer the derivative), so only the plain lookup is checked
      // here; tests/golden checks those options against PyTorch.
      {"layer_norm", [] { return TensorList{leaf({3, 2, 5}, 101, -2, 2), leaf({5}, 102, 0.5, 1.5), leaf({5}, 103)}; },
       [](L x) { return ts::layer_norm(x[0], {5}, x[1], x[2]); }},
      {"layer_norm two dims, no affine, non-contiguous", [] { return TensorList{leaf({2, 3, 4}, 104, -1, 1, true)}; },
       [](L x) { return ts::layer_norm(x[0], {3, 4}, {}, {}, 1e-3); }},
      {"layer_norm weight only, long rows", [] { return TensorList{leaf({2, 37}, 105, -1, 3), leaf({37}, 106, 0.5, 1.5)}; },
       [](L x) { return ts::layer_norm(x[0], {37}, x[1]); }},
      {"gelu", [] { return TensorList{leaf({3, 7}, 107, -3, 3, true)}; }, [](L x) { return ts::gelu(x[0]); }},
      {"gelu tanh", [] { return TensorList{leaf({9}, 108, -4, 4)}; }, [](L x) { return ts::gelu(x[0], "tanh"); }},
      {"erf", [] { return TensorList{leaf({2, 5}, 109, -2, 2)}; }, [](L x) { return x[0].erf(); }},
      // The ops a model author missed (issue 29): sin and cos are nodes of their own, the
      // rest composites checked end to end. Values stay away from clamp's bounds and from
      // ties (the derivative's kinks).
      {"sin cos, non-contiguous", [] { return TensorList{leaf({3, 4}, 120, -4, 4, true)}; },
       [](L x) { return x[0].sin() * 2.0 + ts::cos(x[0] * 1.5); }},
      {"clamp both bounds", [] { return TensorList{leaf_away_from_zero({4, 6}, 121)}; },
       [](L x) { return ts::clamp(x[0], -0.55, 0.45) * 2.0 + x[0].clamp_min(0.05) + x[0].clamp_max(-0.05); }},
      {"silu", [] { return TensorList{leaf({7}, 122, -4, 4)}; }, [](L x) { return ts::silu(x[0]); }},
      {"logsumexp over two dims, keepdim", [] { return TensorList{leaf({3, 4, 5}, 123, -3, 3, true)}; },
       [](L x) { return ts::logsumexp(x[0], {0, 2}, true) + x[0].logsumexp({-1}).sum(); }},
      {"var std, corrections", [] { return TensorList{leaf({4, 6}, 124)}; },
       [](L x) { return ts::var(x[0], {1}) * 2.0 + x[0].std({0}, 0, true).sum() + ts::var(x[0]); }},
      {"amin min argmin-picked", [] { return TensorList{leaf({4, 5}, 125)}; },
       [](L x) { return ts::amin(x[0], {1}) * 2.0 + std::get<0>(x[0].min(0)).sum(); }},
      {"sort values, descending", [] { return TensorList{leaf({3, 6}, 126)}; },
       [](L x) {
         return std::get<0>(x[0].sort(-1)) * ts::arange(18, {.dtype = DType::f64}).view({3, 6}) +
                std::get<0>(ts::sort(x[0], 0, true)).sum();
       }},
      {"mse l1 losses", [] { return TensorList{leaf({3, 4}, 127), leaf_away_from_zero({3, 4}, 128)}; },
       [](L x) { return ts::mse_loss(x[0], x[1]) + ts::l1_loss(x[0] * 0.0 + x[1] * 2.0, x[1], ts::Reduction::sum); }},
      {"binary_cross_entropy with weight", [] { return TensorList{leaf({3, 4}, 129, 0.05, 0.95), leaf({3, 4}, 130, 0, 1)}; },
       [](L x) { return ts::binary_cross_entropy(x[0], x[1], ts::full({4}, 1.5, {.dtype = DType::f64})); }},
      {"binary_cross_entropy_with_logits, pos_weight", [] { return TensorList{leaf({3, 4}, 131, -4, 4), leaf({4}, 132, 0.5, 2)}; },
       [](L x) {
         ts::Generator gen(7);
         Tensor target = ts::rand({3, 4}, gen, {.dtype = DType::f64});
         return ts::binary_cross_entropy_with_logits(x[0], target, {.pos_weight = x[1], .reduction = ts::Reduction::sum});
       }},
      {"conv1d strided, dilated, padded", [] { return TensorList{leaf({2, 3, 11}, 133), leaf({4, 3, 3}, 134), leaf({4}, 135)}; },
       [](L x) { return ts::conv1d(x[0], x[1], x[2], {.stride = 2, .padding = 2, .dilation = 2}); }},
      {"avg_pool2d padded, padding excluded", [] { return TensorList{leaf({2, 2, 5, 6}, 136)}; },
       [](L x) {
         return ts::avg_pool2d(x[0], 3, 2, 1) + ts::avg_pool2d(x[0], 3, 2, 1, {.count_include_pad = false}) * 2.0;
       }},
      {"group_norm", [] { return TensorList{leaf({2, 6, 3, 2}, 137), leaf({6}, 138, 0.5, 1.5), leaf({6}, 139)}; },
       [](L x) { return ts::group_norm(x[0], 3, x[1], x[2]); }},
      {"embedding, repeated indices", [] { return TensorList{leaf({6, 3}, 110)}; },
       [](L x) { return ts::embedding(ts::tensor<int64_t>({4, 0, 4, 5, 2, 4}, {2, 3}), x[0]); }},
      // Views, copies and joins.
      {"view reshape flatten", [] { return TensorList{leaf({2, 3, 4}, 59)}; },
       [](L x) { return x[0].view({6, 4}).reshape({4, 6}).flatten() * ts::arange(24, {.dtype = DType::f64}); }},
      {"reshape of non-contiguous", [] { return TensorList{leaf({3, 4}, 60, -1, 1, true)}; },
       [](L x) { return x[0].reshape({12}) * ts::arange(12, {.dtype = DType::f64}); }},
      {"narrow select", [] { return TensorList{leaf({4, 5}, 61)}; },
       [](L x) { return x[0].narrow(1, 1, 3).select(0, 2) * 3.0 + x[0].select(1, -1).sum(); }},
      {"transpose permute t", [] { return TensorList{leaf({2, 3, 4}, 62)}; },
       [](L x) { return x[0].permute({2, 0, 1}).transpose(0, 2).select(2, 1).t() * ts::arange(6, {.dtype = DType::f64}).view({2, 3}); }},
      {"squeeze unsqueeze", [] { return TensorList{leaf({3, 1, 2}, 63)}; },
       [](L x) { return x[0].squeeze(1).unsqueeze(0).squeeze() * 2.0 + x[0].squeeze().sum(); }},
      {"expand", [] { return TensorList{leaf({3, 1}, 64)}; },
       [](L x) { return x[0].expand({2, 3, 4}) * ts::arange(24, {.dtype = DType::f64}).view({2, 3, 4}); }},
      {"contiguous clone", [] { return TensorList{leaf({3, 4}, 65, -1, 1, true)}; },
       [](L x) { return x[0].contiguous().clone() * ts::arange(12, {.dtype = DType::f64}).view({3, 4}); }},
      {"pin_memory", [] { return TensorList{leaf({2, 3}, 65)}; },
       [](L x) { return x[0].pin_memory() * ts::arange(6, {.dtype = DType::f64}).view({2, 3}); }},
      {"to dtype", [] { return TensorList{leaf({3}, 66)}; },
       [](L x) { return x[0].to(DType::f32).to(DType::f64) * 0.0 + x[0] * 2.0; }},
      {"cat stack", [] { return TensorList{leaf({2, 3}, 67), leaf({1, 3}, 68)}; },
       [](L x) { return ts::stack({ts::cat({x[0], x[1]}, 0), ts::cat({x[1], x[0]}, 0)}, 1) * ts::arange(18, {.dtype = DType::f64}).view({3, 2, 3}); }},
      // Masks, indexing, selection and scans (repeated indices make the backward adds add).
      {"masked_fill, mask broadcast to x", [] { return TensorList{leaf({2, 3, 4}, 78)}; },
       [](L x) { return x[0].masked_fill(ts::tensor<bool>({true, false, false, true}, {1, 1, 4}), -2.5) * 3.0; }},
      {"masked_fill, x broadcast to the mask", [] { return TensorList{leaf({3, 1}, 79)}; },
       [](L x) { return ts::masked_fill(x[0], ts::arange(12).view({4, 3, 1}) > ts::full({}, 5, {.dtype = DType::i64}), 0.5); }},
      {"tril triu, batched, non-contiguous", [] { return TensorList{leaf({2, 4, 5}, 80, -1, 1, true)}; },
       [](L x) { return x[0].tril(1) * 2.0 + x[0].triu(-1) + ts::tril(x[0], -3); }},
      {"split by sizes and chunk, unused pieces", [] { return TensorList{leaf({5, 6}, 81)}; },
       [](L x) {
         std::vector<Tensor> p = x[0].split(std::vector<int64_t>{1, 2, 3}, 1);
         std::vector<Tensor> c = ts::chunk(x[0], 3, 0);
         return p[0] * p[2] + c[1].sum() + p[1].sum({1}, true);
       }},
      {"split by size, last piece shorter", [] { return TensorList{leaf({7, 3}, 82, -1, 1, true)}; },
       [](L x) { return ts::split(x[0], 3, 0)[2] * 3.0; }},
      {"index_select, repeated indices", [] { return TensorList{leaf({4, 5, 3}, 83)}; },
       [](L x) { return x[0].index_select(1, labels({4, 0, 4, 2})); }},
      {"index_select dim 0, non-contiguous", [] { return TensorList{leaf({5, 4}, 84, -1, 1, true)}; },
       [](L x) { return ts::index_select(x[0], 0, labels({3, 3, 1})); }},
      {"gather dim 1, repeated indices", [] { return TensorList{leaf({3, 5}, 85)}; },
       [](L x) { return x[0].gather(1, ts::tensor<int64_t>({0, 4, 4, 1, 1, 2, 3, 0, 0}, {3, 3})); }},
      {"gather dim 0, index smaller than x", [] { return TensorList{leaf({4, 3, 2}, 86, -1, 1, true)}; },
       [](L x) { return ts::gather(x[0], 0, ts::tensor<int64_t>({3, 0, 1, 1, 2, 2, 0, 3}, {2, 2, 2})); }},
      {"scatter_add, src wider than index", [] { return TensorList{leaf({3, 5}, 87), leaf({3, 4}, 88)}; },
       [](L x) { return x[0].scatter_add(1, ts::tensor<int64_t>({0, 4, 0, 2, 2, 2, 1, 3, 4}, {3, 3}), x[1]); }},
      {"topk largest", [] { return TensorList{leaf({3, 6}, 89)}; },
       [](L x) { return std::get<0>(x[0].topk(3, 1)); }},
      {"topk smallest along dim 0, non-contiguous", [] { return TensorList{leaf({5, 4}, 90, -1, 1, true)}; },
       [](L x) { return std::get<0>(ts::topk(x[0], 2, 0, /*largest=*/false)); }},
      {"cumsum", [] { return TensorList{leaf({3, 4, 2}, 91)}; }, [](L x) { return x[0].cumsum(1); }},
      {"cumsum last dim, non-contiguous", [] { return TensorList{leaf({3, 5}, 92, -1, 1, true)}; },
       [](L x) { return ts::cumsum(x[0], -1); }},
      // softmax and log_softmax over every dim, contiguous or not.
      {"softmax dim 0 and last of a 3-D tensor", [] { return TensorList{leaf({3, 4, 2}, 93, -2, 2)}; },
       [](L x) { return x[0].softmax(0) + ts::softmax(x[0], -1) * 2.0; }},
      {"log_softmax middle dim, non-contiguous", [] { return TensorList{leaf({2, 5, 3}, 94, -2, 2, true)}; },
       [](L x) { return x[0].log_softmax(1) + ts::log_softmax(x[0], -2); }},
      // Losses on [N, C, d1, ...], ignore_index and label smoothing.
      {"nll_loss [N, C, d1, d2] weighted, ignore_index", [] { return TensorList{leaf({2, 3, 2, 2}, 95)}; },
       [](L x) {
         return ts::nll_loss(x[0], ts::tensor<int64_t>({0, 2, -100, 1, 1, 1, 2, -100}, {2, 2, 2}),
                             {.weight = ts::tensor<double>({0.2, 1.0, 3.0})});
       }},
      {"nll_loss [N, C, d] none", [] { return TensorList{leaf({2, 4, 3}, 96)}; },
       [](L x) {
         return ts::nll_loss(x[0], ts::tensor<int64_t>({3, 0, 1, 2, 2, 0}, {2, 3}), {.reduction = ts::Reduction::none});
       }},
      {"cross_entropy label smoothing, weighted, ignore_index, [N, C, d]", [] { return TensorList{leaf({3, 4, 2}, 97, -2, 2)}; },
       [](L x) {
         return ts::cross_entropy(x[0], ts::tensor<int64_t>({0, 3, 1, 1, 2, 1}, {3, 2}),
                                  {.weight = ts::tensor<double>({0.5, 1.0, 2.0, 1.5}), .ignore_index = 1,
                                   .label_smoothing = 0.2});
       }},
      {"cross_entropy label smoothing, sum and none", [] { return TensorList{leaf({5, 3}, 98, -2, 2)}; },
       [](L x) {
         Tensor t = labels({0, 2, -100, 1, 2});
         return ts::cross_entropy(x[0], t, {.reduction = ts::Reduction::sum, .label_smoothing = 0.1}) +
                ts::cross_entropy(x[0], t, {.reduction = ts::Reduction::none, .label_smoothing = 0.3});
       }},
      {"cross_entropy of one score vector [C], label smoothing", [] { return TensorList{leaf({5}, 99, -2, 2)}; },
       [](L x) { return ts::cross_entropy(x[0], ts::full({}, 3, {.dtype = DType::i64}), {.label_smoothing = 0.25}); }},
      // Attention: the blocked kernel (float64), then the unblocked path a mask with a gradient takes.
      {"scaled_dot_product_attention", [] { return TensorList{leaf({2, 2, 4, 3}, 80), leaf({2, 2, 5, 3}, 81), leaf({2, 2, 5, 2}, 82)}; },
       [](L x) { return ts::scaled_dot_product_attention(x[0], x[1], x[2], {.scale = 0.7}); }},
      {"scaled_dot_product_attention causal, from [B, T, H, D]",
       [] { return TensorList{leaf({1, 5, 2, 3}, 83, -2, 2), leaf({1, 4, 2, 3}, 84, -2, 2), leaf({1, 4, 2, 3}, 85)}; },
       [](L x) {
         return ts::scaled_dot_product_attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2),
                                                 {.is_causal = true});
       }},
      {"scaled_dot_product_attention boolean mask with an empty row, dropout",
       [] { return TensorList{leaf({2, 4, 3}, 86), leaf({2, 5, 3}, 87), leaf({2, 5, 3}, 88)}; },
       [](L x) {
         const Tensor keep = ts::gt(ts::tensor<double>({1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1}, {4, 5}),
                                    ts::zeros({}, {.dtype = DType::f64}));
         return ts::scaled_dot_product_attention(x[0], x[1], x[2],
                                                 {.attn_mask = keep, .dropout_p = 0.3, .dropout_key = {.seed = 4, .step = 2}});
       }},
      {"scaled_dot_product_attention learned float mask (unblocked)",
       [] { return TensorList{leaf({2, 3, 2}, 89), leaf({2, 4, 2}, 90), leaf({2, 4, 2}, 91), leaf({3, 4}, 92)}; },
       [](L x) { return ts::scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3]}); }},
      // Spatial and einsum ops: composites (no nodes of their own), checked end to end.
      {"einsum batched matmul, non-contiguous", [] { return TensorList{leaf({2, 3, 4}, 290, -1, 1, true), leaf({2, 4, 2}, 291)}; },
       [](L x) { return ts::einsum("bij,bjk->bik", {x[0], x[1]}); }},
      {"einsum diagonal, trace, transpose", [] { return TensorList{leaf({3, 3}, 292, -1, 1, true)}; },
       [](L x) { return ts::einsum("ii->i", {x[0]}) * 2.0 + ts::einsum("ii", {x[0]}) + ts::einsum("ij->ji", {x[0]}); }},
      {"einsum three operands with an ellipsis", [] { return TensorList{leaf({2, 3, 4}, 293), leaf({4, 5}, 294), leaf({5}, 295)}; },
       [](L x) { return ts::einsum("...ij,jk,k->...i", {x[0], x[1], x[2]}); }},
      {"einsum size-1 broadcast, letters of one operand summed", [] { return TensorList{leaf({3, 1}, 296), leaf({2, 4}, 297)}; },
       [](L x) { return ts::einsum("ij,kj->i", {x[0], x[1]}); }},
      {"pad constant with a crop, non-contiguous", [] { return TensorList{leaf({2, 3, 4}, 298, -1, 1, true)}; },
       [](L x) { return ts::pad(x[0], {1, -1, 2, 0}, "constant", 0.5); }},
      {"pad reflect, replicate, circular", [] { return TensorList{leaf({1, 2, 4, 5}, 299, -1, 1, true)}; },
       [](L x) {
         return ts::pad(x[0], {2, 1, 1, 2}, "reflect") + ts::pad(x[0], {2, 1, 1, 2}, "replicate") * 2.0 +
                ts::pad(x[0], {2, 1, 1, 2}, "circular") * 3.0;
       }},
      {"unfold with dilation, padding, stride, non-contiguous", [] { return TensorList{leaf({1, 2, 5, 6}, 300, -1, 1, true)}; },
       [](L x) { return ts::unfold(x[0], {2, 3}, {1, 2}, 1, {2, 1}); }},
      {"fold overlapping, padded", [] { return TensorList{leaf({1, 8, 9}, 301, -1, 1, true)}; },
       [](L x) { return ts::fold(x[0], {4, 5}, 2, 1, 1, 2); }},
      {"interpolate nearest and nearest-exact", [] { return TensorList{leaf({1, 2, 3, 4}, 302, -1, 1, true)}; },
       [](L x) {
         return ts::interpolate(x[0], {.size = {5, 7}}) + ts::interpolate(x[0], {.size = {5, 7}, .mode = "nearest-exact"});
       }},
      {"interpolate bilinear, both align_corners", [] { return TensorList{leaf({1, 2, 3, 4}, 303, -1, 1, true)}; },
       [](L x) {
         return ts::interpolate(x[0], {.size = {5, 6}, .mode = "bilinear"}) +
                ts::interpolate(x[0], {.size = {5, 6}, .mode = "bilinear", .align_corners = true});
       }},
      {"interpolate linear down, trilinear up", [] { return TensorList{leaf({2, 2, 5}, 304), leaf({1, 1, 2, 3, 2}, 305)}; },
       [](L x) {
         return ts::interpolate(x[0], {.size = {3}, .mode = "linear"}).sum() +
                ts::interpolate(x[1], {.scale_factor = {1.5}, .mode = "trilinear"}).sum() * 0.5 +
                ts::interpolate(x[1], {.size = {3, 4, 3}, .mode = "trilinear", .align_corners = true}).pow(2.0).sum();
       }},
  };
  return cases;
}

}  // namespace

TEST_CASE("every differentiable op passes its f64 gradient check") {
  for (const OpCase& c : op_cases()) {
    CAPTURE(c.name);
    TensorList inputs = c.inputs();
    ts::autograd::GradcheckResult result = ts::autograd::gradcheck(c.f, inputs);
    INFO(result.message);
    CHECK(result.ok);
  }
}

TEST_CASE("the table reaches every backward node the library records") {
  std::set<std::string> recorded = test_support::recorded_backward_nodes();

  std::set<std::string> covered;
  for (const OpCase& c : op_cases()) test_support::collect_node_names(c.f(c.inputs()), covered);
  // Moving between devices needs a second device: the gpu suite checks that node.
  recorded.erase("ToDeviceBackward");
  for (const std::string& name : recorded) {
    CAPTURE(name);
    CHECK(covered.count(name) == 1);
  }
}
