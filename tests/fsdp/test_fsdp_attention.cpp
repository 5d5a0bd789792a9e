// FSDP over models built from nn::MultiheadAttention and the transformer layers, whose calls
// take several tensors (query, key, value; src and masks; tgt and memory): fully_shard's
// hooks must run for them as for one tensor, or the first forward finds a unit's
// parameters released. Against the one-rank truth at 1 to 4 ranks: rank 0 trains the plain
// model on the whole global batch, every rank the sharded one on its rows (dropout masks,
// attention dropout's among them, keyed by global row). float64, SGD with momentum,
// tolerance 1e-10 normwise relative: the sharded run sums gradients over ranks in another
// order than the one-rank run sums over rows, so the two differ by rounding only (as
// test_fsdp_transformer). Not Adam: in_proj_bias's key third has a zero gradient (softmax
// ignores a shift shared by every key), so its gradient is rounding noise, which Adam
// scales up to lr-sized steps of either sign (6e-11 measured at 2 to 4 ranks); SGD keeps
// noise at noise.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "../dist/dist_test_support.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
namespace nn = tessera::nn;
using ts::DType;
using ts::Tensor;
using test_support::relative_difference;

namespace {

constexpr int64_t kFeatures = 6, kWidth = 8, kHeads = 2, kTokens = 5, kClasses = 3, kGlobalBatch = 12;
constexpr uint64_t kSeed = 7;
const nn::TransformerLayerOptions kLayer{
    .dim_feedforward = 16, .dropout = 0.1, .activation = "gelu", .batch_first = true};

// A classifier over a TransformerEncoder (two layers and a final LayerNorm), called with
// the inputs and a key padding mask: model(x, padding) goes through Module::call too.
struct EncoderClassifier : nn::Module {
  // TransformerEncoder copies its layer's values, so they exist before reset_parameters
  // could re-key them: the seed is set before any member is built instead.
  struct SeedFirst {
    SeedFirst() { ts::manual_seed(kSeed); }
  } seed_first;
  nn::Linear embed{kFeatures, kWidth};
  nn::TransformerEncoderLayer layer{kWidth, kHeads, kLayer};
  nn::TransformerEncoder encoder{layer, 2, std::make_shared<nn::LayerNorm>(kWidth)};
  nn::Linear head{kWidth, kClasses};
  static constexpr const char* kAttentionWeight = "encoder.layers.0.self_attn.in_proj_weight";

  EncoderClassifier() {
    register_modules({{"embed", embed}, {"encoder", encoder}, {"head", head}});
    to(DType::f64);
  }
  Tensor operator()(const Tensor& x, const Tensor& padding) {
    return call({x, padding}, [this](std::vector<Tensor>& in) { return std::vector<Tensor>{forward(in[0], in[1])}; })
        .front();
  }
  Tensor forward(const Tensor& x, const Tensor& padding) {
    Tensor h = encoder(embed(x), {.src_key_padding_mask = padding});
    return head(h.mean({1}));
  }
};

// An encoder layer making the memory and a decoder layer attending to it under a causal
// mask: the decoder's call takes (tgt, memory), and memory's gradient reaches the encoder.
struct EncoderDecoder : nn::Module {
  nn::Linear embed_src{kFeatures, kWidth}, embed_tgt{kFeatures, kWidth};
  nn::TransformerEncoderLayer encoder{kWidth, kHeads, kLayer};
  nn::TransformerDecoderLayer decoder{kWidth, kHeads, kLayer};
  nn::Linear head{kWidth, kClasses};
  static constexpr const char* kAttentionWeight = "decoder.multihead_attn.in_proj_weight";

  EncoderDecoder() {
    register_modules({{"embed_src", embed_src}, {"embed_tgt", embed_tgt}, {"encoder", encoder},
                      {"decoder", decoder}, {"head", head}});
    to(DType::f64);
    reset_parameters(kSeed);
  }
  Tensor operator()(const Tensor& src, const Tensor& tgt) {
    return call({src, tgt}, [this](std::vector<Tensor>& in) { return std::vector<Tensor>{forward(in[0], in[1])}; })
        .front();
  }
  Tensor forward(const Tensor& src, const Tensor& tgt) {
    Tensor memory = encoder(embed_src(src), nn::TransformerEncoderForwardOptions{});
    Tensor y = decoder(embed_tgt(tgt), memory, {.tgt_is_causal = true});  // no tgt_mask: the causal one
    return head(y.mean({1}));
  }
};

struct Batch {
  Tensor first, second, labels;  // (x, padding) or (src, tgt); class labels
};

// Padding: the last k tokens of row r masked, k = r % 3 (never all of them).
Tensor padding_mask() {
  std::vector<double> values;
  for (int64_t row = 0; row < kGlobalBatch; ++row) {
    for (int64_t t = 0; t < kTokens; ++t) values.push_back(t >= kTokens - row % 3 ? 1 : 0);
  }
  return ts::tensor<double>(values).to(DType::boolean).reshape({kGlobalBatch, kTokens});
}

template <class Model>
std::vector<Batch> make_data(int steps) {
  ts::Generator gen(kSeed);
  std::vector<Batch> data;
  for (int i = 0; i < steps; ++i) {
    Batch batch;
    batch.first = ts::randn({kGlobalBatch, kTokens, kFeatures}, gen).to(DType::f64);
    batch.second = std::is_same_v<Model, EncoderClassifier>
                       ? padding_mask()
                       : ts::randn({kGlobalBatch, kTokens, kFeatures}, gen).to(DType::f64);
    batch.labels = ts::randint(0, kClasses, {kGlobalBatch}, gen);
    data.push_back(batch);
  }
  return data;
}

// One SGD step on `rows` of the global batch; returns the global mean loss.
template <class Model>
double train_step(Model& model, ts::optim::Optimizer& optimizer, const Batch& batch, int step, ts::data::RowRange rows,
                  ts::dist::ProcessGroup* group) {
  ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
  optimizer.zero_grad();
  auto mine = [&](const Tensor& t) { return t.narrow(0, rows.begin, rows.size()); };
  Tensor logits = model(mine(batch.first), mine(batch.second));
  Tensor loss = ts::cross_entropy(logits, mine(batch.labels), {.reduction = ts::Reduction::sum}) /
                static_cast<double>(kGlobalBatch);
  loss.backward();
  optimizer.step();
  Tensor global = loss.detach();
  if (group) group->all_reduce(global);
  return global.item<double>();
}

template <class Model>
void check_parity(const fsdp::WrapPolicy& policy, const std::vector<std::string>& expected_units,
                  const std::string& what) {
  CAPTURE(what);
  const auto& world = dist_test::world();
  const int steps = 3;
  std::vector<Batch> data = make_data<Model>(steps);

  Model reference;
  std::vector<double> losses(steps, 0.0);
  if (world->rank() == 0) {
    ts::optim::SGD optimizer(reference.parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int step = 0; step < steps; ++step) {
      losses[step] = train_step(reference, optimizer, data[step], step, {0, kGlobalBatch}, nullptr);
    }
  }
  Tensor loss_tensor = ts::tensor<double>(losses);
  world->broadcast(loss_tensor, 0);
  losses = loss_tensor.to_vector<double>();

  Model model;
  fsdp::fully_shard(model, world, {.wrap_policy = policy, .gradient_reduction = ts::dist::ReduceOp::sum});
  std::vector<std::string> units;
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) units.push_back(unit.name);
  for (const std::string& name : expected_units) {
    CAPTURE(name);
    CHECK(std::find(units.begin(), units.end(), name) != units.end());
  }
  ts::optim::SGD optimizer(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  const ts::data::RowRange rows = dist_test::my_rows(kGlobalBatch);
  double worst_loss = 0;
  for (int step = 0; step < steps; ++step) {
    const double loss = train_step(model, optimizer, data[step], step, rows, world.get());
    CHECK(std::isfinite(loss));
    worst_loss = std::max(worst_loss, std::abs(loss - losses[step]) / std::abs(losses[step]));
  }
  double worst_parameter = 0;
  std::string worst_name;
  ts::StateDict full = model.state_dict();
  ts::StateDict expected = reference.state_dict();
  CHECK(full.keys() == expected.keys());
  for (auto& [name, tensor] : expected) {
    Tensor truth = tensor.contiguous().clone();
    world->broadcast(truth, 0);
    const double difference = relative_difference(full.at(name), truth);
    if (difference > worst_parameter) worst_name = name;
    worst_parameter = std::max(worst_parameter, difference);
  }
  // The first step moved the attention weights: the comparison is not of initial values.
  Model untrained;
  CHECK(relative_difference(full.at(Model::kAttentionWeight), untrained.state_dict().at(Model::kAttentionWeight)) > 1e-4);
  if (world->rank() == 0) {
    MESSAGE(what, " at ", world->size(), " ranks: ", units.size(), " units, worst loss error ", worst_loss,
            ", worst parameter error ", worst_parameter, " (", worst_name, ")");
  }
  CHECK(worst_loss <= 1e-10);
  CHECK(worst_parameter <= 1e-10);
}

}  // namespace

TEST_CASE("a TransformerEncoder classifier sharded per layer and at the root trains as on one rank") {
  check_parity<EncoderClassifier>(fsdp::WrapPolicy::module_type({"TransformerEncoderLayer"}),
                                  {"encoder.layers.0", "encoder.layers.1"}, "a unit per encoder layer");
  // Units inside units: each attention's parameters are gathered by its own call's hooks.
  check_parity<EncoderClassifier>(fsdp::WrapPolicy::module_type({"TransformerEncoderLayer", "MultiheadAttention"}),
                                  {"encoder.layers.0.self_attn", "encoder.layers.0"},
                                  "a unit per encoder layer and per attention");
  check_parity<EncoderClassifier>(fsdp::WrapPolicy::owns_parameters(),
                                  {"encoder.layers.1.self_attn.out_proj", "encoder.layers.1.self_attn", "encoder.layers.1.linear1"},
                                  "a unit per module with parameters");
}

TEST_CASE("a TransformerDecoderLayer attending to an encoder's memory trains sharded as on one rank") {
  check_parity<EncoderDecoder>(fsdp::WrapPolicy::module_type({"TransformerEncoderLayer", "TransformerDecoderLayer"}),
                               {"decoder", "encoder"}, "a unit per layer");
  check_parity<EncoderDecoder>(
      fsdp::WrapPolicy::module_type({"TransformerEncoderLayer", "TransformerDecoderLayer", "MultiheadAttention"}),
      {"decoder.multihead_attn", "decoder.self_attn", "decoder"}, "a unit per layer and per attention");
}
