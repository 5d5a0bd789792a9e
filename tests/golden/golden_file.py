"""What the golden generators here (make_*golden.py) share: where they write, the float
dtypes every case runs in, PyTorch set to one deterministic thread (one thread is the order
Tessera sums in at any count), the fixed upstream gradient of a case's backward, the case's
tensor names, and the writing itself. write() stores the tensors with the
metadata the C++ tests read (the generator, torch's version, the case table as JSON in
"cases"), then checks that the file reads back as written (which also tests
tools/safetensors_torch.py) and stays under 1 MB.

    import golden_file
    OUTPUT = os.path.join(golden_file.HERE, "layers.safetensors")
    golden_file.write(OUTPUT, tensors, table, "tests/golden/make_layers_golden.py")
"""

import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import safetensors_torch  # noqa: E402

FLOAT_DTYPES = {"F32": torch.float32, "F64": torch.float64}
MAX_BYTES = 1_000_000


def use_one_deterministic_thread():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def backward_from_random_gradient(y, generator, dtype):
    """Backpropagates a standard normal upstream gradient (drawn in float64, then cast to
    `dtype`) from y, and returns it."""
    grad_output = torch.randn(y.shape, generator=generator, dtype=torch.float64).to(dtype)
    y.backward(grad_output)
    return grad_output


def with_outputs_and_gradients(roles, grads, outputs, generator):
    """A case's stored roles: its inputs, its outputs ("output", or "output_<i>" for ops with
    several), a standard normal upstream gradient for every output that needs one
    ("grad_output..."; all backpropagated together, so that the backward of multi-output
    ops sees them all) and the gradients of the differentiable inputs `grads`."""
    out = dict(roles)
    named = {"output": outputs[0]} if len(outputs) == 1 else {f"output_{i}": t for i, t in enumerate(outputs)}
    out.update(named)
    differentiable = [(role, t) for role, t in named.items() if t.requires_grad]
    if differentiable:
        upstream = []
        for role, t in differentiable:
            grad_output = torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.dtype)
            out["grad_" + role] = grad_output
            upstream.append(grad_output)
        torch.autograd.backward([t for _, t in differentiable], upstream)
        for role in grads:
            out["grad_" + role] = roles[role].grad
    return out


def case_tensors(name, dtype_name, roles):
    """The file's entries of a case: "<name>_<dtype>/<role>", detached."""
    return {f"{name}_{dtype_name.lower()}/{role}": t.detach() for role, t in roles.items()}


def write(output, tensors, table, generator):
    metadata = {
        "generator": generator,
        "torch_version": torch.__version__,
        "cases": json.dumps(table, separators=(",", ":")),
    }
    safetensors_torch.save(tensors, output, metadata)

    back = safetensors_torch.load(output)
    assert list(back) == list(tensors)
    for key, tensor in tensors.items():
        assert back[key].dtype == tensor.dtype and back[key].shape == tensor.shape, key
        if tensor.is_floating_point():  # NaN stored on purpose reads back as NaN
            assert torch.allclose(back[key], tensor, rtol=0, atol=0, equal_nan=True), key
        else:
            assert torch.equal(back[key], tensor), key
    assert safetensors_torch.load_metadata(output) == metadata
    size = os.path.getsize(output)
    assert size < MAX_BYTES, size
    print(f"wrote {output}: {len(table)} cases, {len(tensors)} tensors, {size} bytes, torch {torch.__version__}")
