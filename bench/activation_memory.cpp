// Bytes the autograd graph holds for backward: examples/mnist_net.h (PyTorch's MNIST
// network, batch 64) and a small GPT (nanoGPT's block: pre-norm causal self-attention in
// plain ops and a GELU MLP; 4 layers, 4 heads, width 128, context 128, vocabulary 512,
// batch 8), both float32 in training mode.
//
// What it measures: the CPU allocator's live bytes after a forward minus those before it,
// with the parameters already materialised, i.e. every tensor the graph's backward
// closures keep (saved inputs and outputs, masks, indices) plus the loss. Counters, not
// timings: the figure is the same on every run and machine, so it is a plain program and
// docs/performance.md records what it printed ("Activation memory").
//
//   build/bench/activation_memory          # one JSON line per model
#include <cmath>
#include <cstdio>
#include <string>

#include "mnist_net.h"

namespace ts = tessera;

namespace {

struct CausalSelfAttention : ts::nn::Module {
  int64_t heads;
  ts::nn::Linear c_attn, c_proj;
  CausalSelfAttention(int64_t width, int64_t heads) : heads(heads), c_attn(width, 3 * width), c_proj(width, width) {
    register_modules({{"c_attn", c_attn}, {"c_proj", c_proj}});
  }
  ts::Tensor forward(ts::Tensor x) override {
    const int64_t batch = x.size(0), time = x.size(1), width = x.size(2), head_size = width / heads;
    std::vector<ts::Tensor> qkv = c_attn(x).split(width, 2);
    auto by_head = [&](const ts::Tensor& t) { return t.view({batch, time, heads, head_size}).transpose(1, 2); };
    ts::Tensor q = by_head(qkv[0]), k = by_head(qkv[1]), v = by_head(qkv[2]);
    ts::Tensor scores = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_size)));
    ts::Tensor future = ts::ones({time, time}).triu(1) > 0.5;  // keys after the query
    ts::Tensor weights = scores.masked_fill(future, -INFINITY).softmax(-1);
    ts::Tensor y = weights.matmul(v).transpose(1, 2).contiguous().view({batch, time, width});
    return c_proj(y);
  }
};

struct Block : ts::nn::Module {
  ts::nn::LayerNorm ln_1, ln_2;
  CausalSelfAttention attn;
  ts::nn::Linear c_fc, mlp_proj;
  ts::nn::GELU gelu{"tanh"};
  Block(int64_t width, int64_t heads)
      : ln_1(width), ln_2(width), attn(width, heads), c_fc(width, 4 * width), mlp_proj(4 * width, width) {
    register_modules({{"ln_1", ln_1}, {"attn", attn}, {"ln_2", ln_2}, {"c_fc", c_fc}, {"mlp_proj", mlp_proj}});
  }
  ts::Tensor forward(ts::Tensor x) override {
    x = x + attn(ln_1(x));
    return x + mlp_proj(gelu(c_fc(ln_2(x))));
  }
};

struct SmallGPT : ts::nn::Module {
  ts::nn::Embedding wte, wpe;
  ts::nn::ModuleList h;
  ts::nn::LayerNorm ln_f;
  ts::nn::Linear lm_head;
  SmallGPT(int64_t vocab, int64_t context, int64_t width, int64_t layers, int64_t heads)
      : wte(vocab, width), wpe(context, width), ln_f(width), lm_head(width, vocab, {.bias = false}) {
    for (int64_t i = 0; i < layers; ++i) h.emplace<Block>(width, heads);
    register_modules({{"wte", wte}, {"wpe", wpe}, {"h", h}, {"ln_f", ln_f}, {"lm_head", lm_head}});
  }
  ts::Tensor forward(ts::Tensor ids) override {
    ts::Tensor x = wte(ids) + wpe(ts::arange(ids.size(1)));
    for (ts::nn::Module& block : h) x = block(x);
    return lm_head(ln_f(x));
  }
};

// Live CPU bytes that one forward adds and keeps until backward (`loss_of` runs it).
template <class Forward>
void report(const char* model_name, ts::nn::Module& model, Forward loss_of) {
  {
    ts::NoGradGuard no_grad;  // materialises the parameters outside the measurement
    loss_of();
  }
  const int64_t before = ts::memory_stats().current_bytes;
  ts::Tensor loss = loss_of();
  const int64_t held = ts::memory_stats().current_bytes - before;
  loss.backward();
  int64_t parameter_bytes = 0;
  for (const ts::Tensor& p : model.parameters()) parameter_bytes += static_cast<int64_t>(p.nbytes());
  std::printf("{\"model\": \"%s\", \"graph_bytes\": %lld, \"parameter_bytes\": %lld}\n", model_name,
              static_cast<long long>(held), static_cast<long long>(parameter_bytes));
}

}  // namespace

int main() {
  ts::manual_seed(0);
  mnist::Net net;
  ts::Tensor images = ts::randn({64, 1, 28, 28});
  ts::Tensor labels = ts::randint(0, 10, {64});
  report("mnist (batch 64)", net, [&] { return ts::nll_loss(net(images), labels); });

  const int64_t vocab = 512, context = 128, batch = 8;
  SmallGPT gpt(vocab, context, /*width=*/128, /*layers=*/4, /*heads=*/4);
  ts::Tensor tokens = ts::randint(0, vocab, {batch, context + 1});
  ts::Tensor inputs = tokens.narrow(1, 0, context).contiguous(), targets = tokens.narrow(1, 1, context).contiguous();
  report("gpt (4 layers, width 128, T 128, batch 8)", gpt, [&] {
    return ts::cross_entropy(gpt(inputs).view({batch * context, vocab}), targets.view({batch * context}));
  });
}
