// FSDP2's explicit schedule (fully_shard.h, schedule_control.cpp), measured by the bytes and
// collectives FSDP counts: reshard_after_forward, set_requires_gradient_sync,
// set_reshard_after_backward, explicit prefetch targets, unshard / reshard of one unit.
// Runs at 1 rank (units kept whole: nothing is gathered, so the byte checks there are 0)
// and under mpirun at 2 to 4.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "../../examples/mnist_net.h"
#include "../dist/dist_test_support.h"
#include "mnist_batch.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using ts::DType;
using ts::Tensor;

namespace {

constexpr int64_t kGlobalBatch = 12;

using fsdp_test::Batch;

Batch make_batch(uint64_t seed) { return fsdp_test::make_batch(seed, kGlobalBatch, DType::f64); }

// This rank's rows of `batch`: forward, the loss summed over the global batch's rows
// divided by `divisor`, backward. Returns the loss.
double forward_backward(ts::nn::Module& model, const Batch& batch, double divisor) {
  const ts::data::RowRange rows = dist_test::my_rows(kGlobalBatch);
  Tensor output = model(batch.images.narrow(0, rows.begin, rows.size()));
  Tensor loss = ts::nll_loss(output, batch.labels.narrow(0, rows.begin, rows.size()), {.reduction = ts::Reduction::sum}) /
                divisor;
  loss.backward();
  return loss.item<double>();
}

void make_model(mnist::Net& model, const fsdp::FullyShardOptions& options = {}) {
  model.to(DType::f64);
  model.eval();  // no dropout: the runs compared must see the same arithmetic
  fsdp::FullyShardOptions sum = options;
  sum.gradient_reduction = ts::dist::ReduceOp::sum;
  fsdp::fully_shard(model, dist_test::world(), sum);
}

int64_t padded_bytes(mnist::Net& model, const std::string& unit_name) {
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) {
    if (unit.name == unit_name) return unit.layout.padded_numel() * static_cast<int64_t>(element_size(unit.layout.dtype()));
  }
  FAIL("no unit ", unit_name);
  return 0;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return a.sizes() == b.sizes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

}  // namespace

TEST_CASE("reshard_after_forward: false gathers each unit once a step (SHARD_GRAD_OP), true twice") {
  const bool sharded = dist_test::world()->size() > 1;
  Batch batch = make_batch(1);
  for (const bool reshard : {true, false}) {
    CAPTURE(reshard);
    mnist::Net model;
    make_model(model, {.reshard_after_forward = reshard});
    forward_backward(model, batch, kGlobalBatch);
    const fsdp::MemoryReport before = fsdp::memory_report(model);
    forward_backward(model, batch, kGlobalBatch);
    const fsdp::MemoryReport after = fsdp::memory_report(model);
    const int64_t gathers_per_unit = sharded ? (reshard ? 2 : 1) : 0;
    CHECK(after.all_gathers - before.all_gathers == gathers_per_unit * after.units);
  }
  mnist::Net contradiction;
  contradiction.to(DType::f64);
  CHECK_THROWS_WITH_AS(fsdp::fully_shard(contradiction, dist_test::world(),
                                         {.strategy = fsdp::ShardingStrategy::shard_grad_op,
                                          .reshard_after_forward = true}),
                       doctest::Contains("reshard_after_forward = true contradicts strategy SHARD_GRAD_OP"),
                       ts::ValueError);
}

TEST_CASE("reshard_after_forward = N (hpZ): each unit keeps 1/N after forward and its backward gathers over N ranks, "
          "bit for bit FULL_SHARD's") {
  const int world = dist_test::world()->size();
  // 4 ranks: groups of 2 (a real hpZ); 2 ranks: N = 2 is the group's size, FULL_SHARD; 1: N = 1 is false.
  const int n = world >= 4 ? world / 2 : world;
  const bool hpz = n > 1 && n < world;
  const Batch batch = make_batch(3), next = make_batch(4);

  mnist::Net model, reference;
  make_model(model, {.reshard_after_forward = n});
  make_model(reference, {.reshard_after_forward = true});
  int64_t padded = 0;  // all units' padded flat buffers
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) padded += unit.layout.padded_numel() * 8;
  const fsdp::MemoryReport start = fsdp::memory_report(model);
  CHECK(start.post_forward_group_size == (hpz ? n : 1));

  // After the forward, before the backward: only each unit's 1/N is held.
  const ts::data::RowRange rows = dist_test::my_rows(kGlobalBatch);
  auto loss_of = [&](mnist::Net& net, const Batch& b) {
    return ts::nll_loss(net(b.images.narrow(0, rows.begin, rows.size())), b.labels.narrow(0, rows.begin, rows.size()),
                        {.reduction = ts::Reduction::sum}) /
           kGlobalBatch;
  };
  Tensor loss = loss_of(model, batch);
  const fsdp::MemoryReport forward = fsdp::memory_report(model);
  CHECK(forward.post_forward_shard_bytes == (hpz ? padded / n : 0));
  CHECK(forward.unsharded_parameter_bytes == forward.post_forward_shard_bytes);
  loss.backward();
  const fsdp::MemoryReport backward = fsdp::memory_report(model);
  CHECK(backward.post_forward_shard_bytes == 0);
  CHECK(backward.unsharded_parameter_bytes == 0);
  // One gather over the world in forward, one over the N-rank group in backward.
  CHECK(backward.all_gathers - start.all_gathers == (world > 1 ? 2 * start.units : 0));
  CHECK(backward.post_forward_all_gathers - start.post_forward_all_gathers == (hpz ? start.units : 0));
  CHECK(backward.post_forward_all_gathered_bytes - start.post_forward_all_gathered_bytes == (hpz ? padded : 0));
  MESSAGE("rank ", dist_test::world()->rank(), ": N = ", n, ", kept after forward ", forward.post_forward_shard_bytes,
          " of ", padded, " B; gathered within the group ",
          backward.post_forward_all_gathered_bytes - start.post_forward_all_gathered_bytes, " B");

  // The same values gathered: FULL_SHARD's gradients, and after a step its next loss.
  Tensor reference_loss = loss_of(reference, batch);
  reference_loss.backward();
  CHECK(same_bits(loss, reference_loss));
  std::vector<Tensor> a = model.parameters(), b = reference.parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(same_bits(a[i].grad(), b[i].grad()));
  ts::optim::SGD sgd(a, {.lr = 0.05}), reference_sgd(b, {.lr = 0.05});
  sgd.step();
  reference_sgd.step();
  CHECK(same_bits(loss_of(model, next), loss_of(reference, next)));

  // A forward without a backward keeps the parts until fsdp::reshard frees them.
  {
    ts::NoGradGuard no_grad;
    (void)loss_of(model, next);
  }
  CHECK(fsdp::memory_report(model).post_forward_shard_bytes == (hpz ? padded / n : 0));
  fsdp::reshard(model);
  CHECK(fsdp::memory_report(model).post_forward_shard_bytes == 0);
  CHECK(fsdp::memory_report(model).unsharded_parameter_bytes == 0);

  mnist::Net refused;
  refused.to(DType::f64);
  CHECK_THROWS_WITH_AS(fsdp::fully_shard(refused, dist_test::world(), {.reshard_after_forward = 3 * world}),
                       doctest::Contains(("reshard_after_forward = " + std::to_string(3 * world) +
                                          " must divide the size of the group").c_str()),
                       ts::ValueError);
  if (hpz) {
    CHECK_THROWS_WITH_AS(fsdp::fully_shard(refused, dist_test::world(),
                                           {.strategy = fsdp::ShardingStrategy::shard_grad_op,
                                            .reshard_after_forward = n}),
                         doctest::Contains(("reshard_after_forward = " + std::to_string(n) +
                                            " contradicts strategy SHARD_GRAD_OP").c_str()),
                         ts::ValueError);
  }
  CHECK_FALSE(fsdp::is_sharded(refused));
}

TEST_CASE("reshard_after_forward = N with activation checkpointing: the recomputation gathers within the group, "
          "bit for bit FULL_SHARD's") {
  const int world = dist_test::world()->size();
  const int n = world >= 4 ? world / 2 : world;
  const bool hpz = n > 1 && n < world;
  const Batch batch = make_batch(5);
  // fc1 and fc2 run their first forward without recording the graph and again in backward.
  mnist::Net model, reference;
  make_model(model, {.reshard_after_forward = n, .activation_checkpointing = {"Linear"}});
  make_model(reference, {.reshard_after_forward = true, .activation_checkpointing = {"Linear"}});
  const fsdp::MemoryReport start = fsdp::memory_report(model);
  const double loss = forward_backward(model, batch, kGlobalBatch);
  const double reference_loss = forward_backward(reference, batch, kGlobalBatch);
  const fsdp::MemoryReport after = fsdp::memory_report(model);
  CHECK(std::memcmp(&loss, &reference_loss, sizeof(double)) == 0);
  std::vector<Tensor> a = model.parameters(), b = reference.parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(same_bits(a[i].grad(), b[i].grad()));
  // Every unit's backward gather (the recomputation's, for fc1 and fc2) came from its kept part.
  CHECK(after.post_forward_all_gathers - start.post_forward_all_gathers == (hpz ? start.units : 0));
  CHECK(after.post_forward_shard_bytes == 0);
  CHECK(after.unsharded_parameter_bytes == 0);
}

TEST_CASE("set_requires_gradient_sync(false) with set_reshard_after_backward(false): micro-batches send nothing, "
          "the last reduces the sum, bit for bit NoSyncScope's") {
  const bool sharded = dist_test::world()->size() > 1;
  const Batch micro[3] = {make_batch(10), make_batch(11), make_batch(12)};
  const Batch next = make_batch(13);

  // FSDP2's recipe: parameters kept gathered and gradients kept local over micro-batches 1-2.
  mnist::Net explicit_model;
  make_model(explicit_model, {.reshard_after_forward = false});
  ts::optim::SGD explicit_sgd(explicit_model.parameters(), {.lr = 0.01});
  fsdp::set_requires_gradient_sync(explicit_model, false);
  fsdp::set_reshard_after_backward(explicit_model, false);
  CHECK_FALSE(fsdp::requires_gradient_sync(explicit_model));
  const int units = fsdp::memory_report(explicit_model).units;
  std::vector<fsdp::MemoryReport> reports{fsdp::memory_report(explicit_model)};
  for (int i = 0; i < 2; ++i) {
    forward_backward(explicit_model, micro[i], 3 * kGlobalBatch);
    reports.push_back(fsdp::memory_report(explicit_model));
  }
  fsdp::set_requires_gradient_sync(explicit_model, true);
  fsdp::set_reshard_after_backward(explicit_model, true);
  forward_backward(explicit_model, micro[2], 3 * kGlobalBatch);
  reports.push_back(fsdp::memory_report(explicit_model));
  auto delta = [&](int i, auto field) { return reports[i + 1].*field - reports[i].*field; };
  using R = fsdp::MemoryReport;
  // Micro-batch 1 gathers each unit once (kept after forward and after backward); 2 and 3
  // gather nothing; only 3 reduces.
  CHECK(delta(0, &R::all_gathers) == (sharded ? units : 0));
  CHECK(delta(1, &R::all_gathers) == 0);
  CHECK(delta(2, &R::all_gathers) == 0);
  CHECK(delta(1, &R::all_gathered_bytes) == 0);
  for (int i = 0; i < 2; ++i) {
    CHECK(delta(i, &R::reduce_scatters) + delta(i, &R::all_reduces) == 0);
    CHECK(delta(i, &R::reduce_scattered_bytes) + delta(i, &R::all_reduced_bytes) == 0);
  }
  CHECK(delta(2, &R::reduce_scatters) == units);
  CHECK(reports[3].unsharded_parameter_bytes == 0);  // resharded after the last backward
  MESSAGE("rank ", dist_test::world()->rank(), ": micro-batch gathers ", delta(0, &R::all_gathered_bytes), " / ",
          delta(1, &R::all_gathered_bytes), " / ", delta(2, &R::all_gathered_bytes), " B, reductions ",
          delta(0, &R::reduce_scattered_bytes), " / ", delta(1, &R::reduce_scattered_bytes), " / ",
          delta(2, &R::reduce_scattered_bytes), " B");

  // The same accumulation through NoSyncScope, FULL_SHARD: the same arithmetic.
  mnist::Net scoped;
  make_model(scoped);
  ts::optim::SGD scoped_sgd(scoped.parameters(), {.lr = 0.01});
  {
    fsdp::NoSyncScope no_sync(scoped);
    forward_backward(scoped, micro[0], 3 * kGlobalBatch);
    forward_backward(scoped, micro[1], 3 * kGlobalBatch);
  }
  forward_backward(scoped, micro[2], 3 * kGlobalBatch);
  std::vector<Tensor> a = explicit_model.parameters(), b = scoped.parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(same_bits(a[i].grad(), b[i].grad()));
  // A step, then the next loss: the shards were written, and the next forward gathers them.
  explicit_sgd.step();
  scoped_sgd.step();
  explicit_sgd.zero_grad();
  scoped_sgd.zero_grad();
  const double explicit_loss = forward_backward(explicit_model, next, kGlobalBatch);
  const double scoped_loss = forward_backward(scoped, next, kGlobalBatch);
  CHECK(std::memcmp(&explicit_loss, &scoped_loss, sizeof(double)) == 0);
}

TEST_CASE("explicit prefetch targets, unshard(async_op) and reshard of one unit") {
  const bool sharded = dist_test::world()->size() > 1;
  Batch batch = make_batch(2);
  mnist::Net model;
  make_model(model);
  forward_backward(model, batch, kGlobalBatch);  // records the forward order

  // Gathered parameter bytes just after conv1's forward (FSDP has resharded conv1 by then):
  // what conv1's pre-forward prefetched.
  int64_t after_conv1 = -1;
  model.conv1.register_forward_hook([&](ts::nn::Module&, Tensor&) {
    after_conv1 = fsdp::memory_report(model).unsharded_parameter_bytes;
  });
  auto gathered_after_conv1 = [&] {
    forward_backward(model, batch, kGlobalBatch);
    return after_conv1;
  };
  CHECK(gathered_after_conv1() == (sharded ? padded_bytes(model, "conv2") : 0));  // the default: the next unit
  fsdp::set_modules_to_forward_prefetch(model, model.conv1, {&model.fc1});
  CHECK(gathered_after_conv1() == (sharded ? padded_bytes(model, "fc1") : 0));
  fsdp::set_modules_to_forward_prefetch(model, model.conv1, {});
  CHECK(gathered_after_conv1() == 0);
  fsdp::set_modules_to_backward_prefetch(model, model.fc2, {});
  const fsdp::MemoryReport before = fsdp::memory_report(model);
  forward_backward(model, batch, kGlobalBatch);  // still one gather per unit per pass
  CHECK(fsdp::memory_report(model).all_gathers - before.all_gathers == (sharded ? 2 * before.units : 0));
  fsdp::reset_prefetch(model);
  CHECK(gathered_after_conv1() == (sharded ? padded_bytes(model, "conv2") : 0));

  // unshard: one all-gather now; the unit's forward then finds it gathered.
  const fsdp::MemoryReport start = fsdp::memory_report(model);
  fsdp::UnshardHandle handle = fsdp::unshard(model, model.fc1, /*async_op=*/true);
  handle.wait();
  const fsdp::MemoryReport unsharded = fsdp::memory_report(model);
  CHECK(unsharded.all_gathers - start.all_gathers == (sharded ? 1 : 0));
  CHECK(unsharded.unsharded_parameter_bytes == (sharded ? padded_bytes(model, "fc1") : 0));
  fsdp::reshard(model, model.fc1);
  CHECK(fsdp::memory_report(model).unsharded_parameter_bytes == 0);
  fsdp::unshard(model, model.fc1).wait();  // synchronous: already done
  forward_backward(model, batch, kGlobalBatch);
  CHECK(fsdp::memory_report(model).all_gathers - unsharded.all_gathers ==
        (sharded ? 1 + 2 * start.units - 1 : 0));  // fc1's forward gather was the unshard's

  CHECK_THROWS_WITH_AS(fsdp::unshard(model, model.dropout1), doctest::Contains("module 'dropout1' (Dropout) is not an FSDP unit"),
                       ts::ValueError);
  CHECK_THROWS_WITH_AS(fsdp::set_modules_to_forward_prefetch(model, model.conv1, {&model.dropout2}),
                       doctest::Contains("its units are conv1, conv2, fc1, fc2"), ts::ValueError);
}
