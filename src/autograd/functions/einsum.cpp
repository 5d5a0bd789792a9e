// torch.einsum as a composite of differentiable ops: the equation is parsed into one label
// per operand dim, repeated labels within an operand become diagonals (index_select of the
// flattened pair), labels no other operand or the output needs are summed first, and the
// operands are then contracted pairwise, left to right, each pair through one batched
// matmul ([batch, free, contracted] @ [batch, contracted, free]), so no outer product of two
// operands is ever materialised.
#include <algorithm>
#include <set>

#include "tessera/autograd/functions.h"
#include "tessera/autograd/spatial_ops.h"
#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera {

namespace {

// Labels: 'A'-'Z' are 0-25 and 'a'-'z' 26-51 (so sorting labels sorts as PyTorch does, upper
// case first); the dims an ellipsis covers, right-aligned across operands, are 52, 53, ...
constexpr int kLetterCount = 52;
constexpr int kEllipsis = -1;  // in a parsed term: where "..." stood

bool is_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
int letter_label(char c) { return c <= 'Z' ? c - 'A' : 26 + (c - 'a'); }
std::string label_name(int label) {
  if (label >= kLetterCount) return "... dim " + std::to_string(label - kLetterCount);
  return std::string(1, static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26)));
}

struct Term {
  std::vector<int> subscripts;  // letter labels, and kEllipsis once at most
  size_t position = 0;          // of the term's first character in the equation
  int64_t letters() const { return std::count_if(subscripts.begin(), subscripts.end(), [](int s) { return s >= 0; }); }
  bool has_ellipsis() const { return std::find(subscripts.begin(), subscripts.end(), kEllipsis) != subscripts.end(); }
};

std::string where(std::string_view equation, size_t position) {
  return str("einsum(\"", equation, "\"): at position ", position, ": ");
}

// The term equation[begin, end): letters, at most one "...", spaces ignored.
Term parse_term(std::string_view equation, size_t begin, size_t end) {
  Term term;
  term.position = begin;
  for (size_t i = begin; i < end; ++i) {
    const char c = equation[i];
    if (c == ' ') continue;
    if (is_letter(c)) {
      term.subscripts.push_back(letter_label(c));
    } else if (c == '.') {
      TS_CHECK(i + 3 <= end && equation.substr(i, 3) == "...", ValueError, where(equation, i),
               "'.' must be part of an ellipsis \"...\"");
      TS_CHECK(!term.has_ellipsis(), ValueError, where(equation, i), "a term may hold only one ellipsis");
      term.subscripts.push_back(kEllipsis);
      i += 2;
    } else {
      TS_CHECK(false, ValueError, where(equation, i), "invalid subscript '", c,
               "': subscripts are letters a-z, A-Z and \"...\"");
    }
  }
  return term;
}

struct Equation {
  std::vector<Term> inputs;
  std::optional<Term> output;  // absent: implicit output
};

Equation parse_equation(std::string_view equation) {
  Equation parsed;
  const size_t arrow = equation.find("->");
  const size_t lhs_end = arrow == std::string_view::npos ? equation.size() : arrow;
  for (size_t i = 0; i < equation.size(); ++i) {
    const bool is_arrow = arrow != std::string_view::npos && (i == arrow || i == arrow + 1);
    TS_CHECK(is_arrow || (equation[i] != '-' && equation[i] != '>'), ValueError, where(equation, i),
             "'", equation[i], "' outside the one \"->\" that separates the output");
  }
  size_t begin = 0;
  for (size_t comma = equation.find(',', 0); begin <= lhs_end; comma = equation.find(',', begin)) {
    const size_t end = std::min(comma, lhs_end);
    parsed.inputs.push_back(parse_term(equation, begin, end));
    begin = end + 1;
  }
  if (arrow != std::string_view::npos) {
    const size_t comma = equation.find(',', arrow);
    TS_CHECK(comma == std::string_view::npos, ValueError, where(equation, comma), "',' in the output");
    parsed.output = parse_term(equation, arrow + 2, equation.size());
  }
  return parsed;
}

// An operand (or partial result) with the label of each of its dims.
struct Labelled {
  Tensor tensor;
  std::vector<int> labels;
};

// The labels of each operand's dims, checked against its number of dims; `ellipsis_dims`
// becomes the most dims any ellipsis covers.
std::vector<Labelled> label_operands(std::string_view equation, const Equation& parsed,
                                     const std::vector<Tensor>& operands, int64_t& ellipsis_dims) {
  ellipsis_dims = 0;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Term& term = parsed.inputs[i];
    const int64_t covered = operands[i].dim() - term.letters();
    const bool fits = term.has_ellipsis() ? covered >= 0 : covered == 0;
    TS_CHECK(fits, ShapeError, where(equation, term.position), "operand ", i, " has ", operands[i].dim(),
             " dims (shape ", shape_str(operands[i].sizes()), ") but its term names ", term.letters(),
             term.has_ellipsis() ? " subscripts and an ellipsis" : " subscripts");
    ellipsis_dims = std::max(ellipsis_dims, covered);
  }
  std::vector<Labelled> labelled;
  for (size_t i = 0; i < operands.size(); ++i) {
    const int64_t covered = operands[i].dim() - parsed.inputs[i].letters();
    Labelled op{operands[i], {}};
    for (int s : parsed.inputs[i].subscripts) {
      if (s != kEllipsis) {
        op.labels.push_back(s);
        continue;
      }
      for (int64_t k = ellipsis_dims - covered; k < ellipsis_dims; ++k) op.labels.push_back(kLetterCount + static_cast<int>(k));
    }
    labelled.push_back(std::move(op));
  }
  return labelled;
}

// The output's labels: as written, or the ellipsis dims then the letters used once, sorted.
std::vector<int> output_labels(std::string_view equation, const Equation& parsed, int64_t ellipsis_dims) {
  std::vector<int> count(kLetterCount, 0);
  for (const Term& term : parsed.inputs)
    for (int s : term.subscripts)
      if (s != kEllipsis) ++count[s];
  std::vector<int> labels;
  auto add_ellipsis = [&] {
    for (int64_t k = 0; k < ellipsis_dims; ++k) labels.push_back(kLetterCount + static_cast<int>(k));
  };
  if (!parsed.output) {
    add_ellipsis();
    for (int label = 0; label < kLetterCount; ++label)
      if (count[label] == 1) labels.push_back(label);
    return labels;
  }
  // Explicit: each letter once, each from an input; an ellipsis left out is summed.
  std::set<int> seen;
  for (int s : parsed.output->subscripts) {
    if (s == kEllipsis) {
      add_ellipsis();
      continue;
    }
    TS_CHECK(count[s] > 0, ValueError, where(equation, parsed.output->position), "output subscript '",
             label_name(s), "' appears in no input");
    TS_CHECK(seen.insert(s).second, ValueError, where(equation, parsed.output->position), "output subscript '",
             label_name(s), "' appears more than once");
    labels.push_back(s);
  }
  return labels;
}

int64_t position_of(const Labelled& op, int label) {
  return std::find(op.labels.begin(), op.labels.end(), label) - op.labels.begin();
}

// Replaces the two dims of a repeated label by their diagonal (moved last), as "ii->i".
void take_diagonal(std::string_view equation, Labelled& op, size_t operand, int64_t first, int64_t second) {
  const int64_t n = op.tensor.size(first);
  TS_CHECK(op.tensor.size(second) == n, ShapeError, "einsum(\"", equation, "\"): subscript '",
           label_name(op.labels[first]), "' is repeated in operand ", operand, " but its dims have sizes ", n,
           " and ", op.tensor.size(second), " (shape ", shape_str(op.tensor.sizes()), ")");
  Shape order, rest_shape;
  std::vector<int> labels;
  for (int64_t d = 0; d < op.tensor.dim(); ++d) {
    if (d == first || d == second) continue;
    order.push_back(d);
    rest_shape.push_back(op.tensor.size(d));
    labels.push_back(op.labels[d]);
  }
  labels.push_back(op.labels[first]);
  order.insert(order.end(), {first, second});
  rest_shape.push_back(n * n);
  // Element (k, k) of the flattened pair is at k * (n + 1).
  const Tensor diagonal = arange(0, static_cast<double>(n * n), static_cast<double>(n + 1),
                                 {.dtype = DType::i64, .device = op.tensor.device()});
  op.tensor = op.tensor.permute(order).reshape(rest_shape).index_select(-1, diagonal);
  op.labels = std::move(labels);
}

void take_diagonals(std::string_view equation, Labelled& op, size_t operand) {
  for (bool repeated = true; repeated;) {
    repeated = false;
    for (int64_t d = 0; d < op.tensor.dim() && !repeated; ++d) {
      const auto later = std::find(op.labels.begin() + d + 1, op.labels.end(), op.labels[d]);
      if (later == op.labels.end()) continue;
      take_diagonal(equation, op, operand, d, later - op.labels.begin());
      repeated = true;
    }
  }
}

// Each label's size over all operands (1 broadcasts), with every operand expanded to it.
void broadcast_labels(std::string_view equation, std::vector<Labelled>& ops) {
  int max_label = 0;
  for (const Labelled& op : ops)
    for (int label : op.labels) max_label = std::max(max_label, label);
  std::vector<int64_t> size_of(max_label + 1, 1);
  std::vector<int> sized_by(size_of.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    for (int64_t d = 0; d < ops[i].tensor.dim(); ++d) {
      const int label = ops[i].labels[d];
      const int64_t n = ops[i].tensor.size(d);
      if (n == 1) continue;
      TS_CHECK(size_of[label] == 1 || size_of[label] == n, ShapeError, "einsum(\"", equation, "\"): subscript '",
               label_name(label), "' has size ", size_of[label], " in operand ", sized_by[label], " but ", n,
               " in operand ", i, " (shape ", shape_str(ops[i].tensor.sizes()), ")");
      size_of[label] = n;
      sized_by[label] = static_cast<int>(i);
    }
  }
  for (Labelled& op : ops) {
    Shape target;
    for (int label : op.labels) target.push_back(size_of[label]);
    if (target != op.tensor.sizes()) op.tensor = op.tensor.expand(target);
  }
}

// Sums the dims whose labels are not in `keep`.
void sum_labels_not_in(Labelled& op, const std::set<int>& keep) {
  Shape dims;
  std::vector<int> kept;
  for (int64_t d = 0; d < op.tensor.dim(); ++d) {
    if (keep.count(op.labels[d])) kept.push_back(op.labels[d]);
    else dims.push_back(d);
  }
  if (dims.empty()) return;  // sum with no dims would reduce everything
  op.tensor = op.tensor.sum(dims);
  op.labels = std::move(kept);
}

int64_t product_of_sizes(const Labelled& op, const std::vector<int>& labels, Shape& sizes) {
  int64_t product = 1;
  for (int label : labels) {
    const int64_t n = op.tensor.size(position_of(op, label));
    sizes.push_back(n);
    product *= n;
  }
  return product;
}

Shape positions(const Labelled& op, const std::vector<int>& labels) {
  Shape dims;
  for (int label : labels) dims.push_back(position_of(op, label));
  return dims;
}

// a and b contracted over the labels they share that `keep` lacks, through one batched matmul
// [batch, a's own, contracted] @ [batch, contracted, b's own]; the shared labels in `keep`
// are the batch. The result's labels are batch, a's own, b's own.
Labelled contract_pair(Labelled a, Labelled b, const std::set<int>& keep) {
  std::set<int> a_needs(keep), b_needs(keep);
  a_needs.insert(b.labels.begin(), b.labels.end());
  b_needs.insert(a.labels.begin(), a.labels.end());
  sum_labels_not_in(a, a_needs);
  sum_labels_not_in(b, b_needs);
  std::vector<int> batch, contracted, a_own, b_own;
  for (int label : a.labels) {
    const bool shared = std::count(b.labels.begin(), b.labels.end(), label) > 0;
    if (!shared) a_own.push_back(label);
    else if (keep.count(label)) batch.push_back(label);
    else contracted.push_back(label);
  }
  for (int label : b.labels)
    if (std::count(a.labels.begin(), a.labels.end(), label) == 0) b_own.push_back(label);

  Shape out_shape, ignored;
  const int64_t batch_size = product_of_sizes(a, batch, out_shape);
  const int64_t m = product_of_sizes(a, a_own, out_shape);
  const int64_t n = product_of_sizes(b, b_own, out_shape);
  const int64_t k = product_of_sizes(a, contracted, ignored);
  auto join = [](std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  const Tensor lhs = a.tensor.permute(positions(a, join(batch, a_own, contracted))).reshape({batch_size, m, k});
  const Tensor rhs = b.tensor.permute(positions(b, join(batch, contracted, b_own))).reshape({batch_size, k, n});
  return {matmul(lhs, rhs).reshape(out_shape), join(batch, a_own, b_own)};
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  const Equation parsed = parse_equation(equation);
  TS_CHECK(!operands.empty(), ValueError, "einsum(\"", equation, "\"): no operands given");
  TS_CHECK(parsed.inputs.size() == operands.size(), ValueError, "einsum(\"", equation, "\"): the equation has ",
           parsed.inputs.size(), " input terms but ", operands.size(), " operands were given");
  for (size_t i = 0; i < operands.size(); ++i)
    TS_CHECK(operands[i].defined(), ValueError, "einsum(\"", equation, "\"): operand ", i, " is an undefined tensor");
  int64_t ellipsis_dims = 0;
  std::vector<Labelled> ops = label_operands(equation, parsed, operands, ellipsis_dims);
  const std::vector<int> out_labels = output_labels(equation, parsed, ellipsis_dims);
  for (size_t i = 0; i < ops.size(); ++i) take_diagonals(equation, ops[i], i);
  broadcast_labels(equation, ops);

  // A label only one operand has and the output lacks is summed there first (cheapest).
  const std::set<int> out_set(out_labels.begin(), out_labels.end());
  for (size_t i = 0; i < ops.size(); ++i) {
    std::set<int> needed(out_set);
    for (size_t j = 0; j < ops.size(); ++j)
      if (j != i) needed.insert(ops[j].labels.begin(), ops[j].labels.end());
    sum_labels_not_in(ops[i], needed);
  }
  Labelled result = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::set<int> keep(out_set);
    for (size_t j = i + 1; j < ops.size(); ++j) keep.insert(ops[j].labels.begin(), ops[j].labels.end());
    result = contract_pair(std::move(result), ops[i], keep);
  }
  sum_labels_not_in(result, out_set);
  // Every output label is in the result now (each came from some operand): put them in order.
  const Shape order = positions(result, out_labels);
  bool identity = true;
  for (size_t d = 0; d < order.size(); ++d) identity = identity && order[d] == static_cast<int64_t>(d);
  return identity ? result.tensor : result.tensor.permute(order);
}

}  // namespace tessera
