"""safetensors files for PyTorch without the `safetensors` package (Debian lacks it).

Writes exactly what Tessera's tessera::io::save writes for the same tensors and metadata:
an 8-byte little-endian header length, a compact JSON header ("__metadata__" first, then
the tensors in the dict's order, each {"dtype", "shape", "data_offsets"}) padded with
spaces to a multiple of 8, then each tensor's little-endian bytes in the same order.
So a reference file written here and one written by Tessera can be compared byte for byte.

    import sys; sys.path.insert(0, "tools")
    import safetensors_torch as st
    st.save({"w": torch.randn(3, 4)}, "ref.safetensors", metadata={"torch": torch.__version__})
    tensors = st.load("model.safetensors")          # Tessera's checkpoint, in PyTorch
    metadata = st.load_metadata("model.safetensors")
"""

import json
import struct
import sys

import torch

if sys.byteorder != "little":
    raise RuntimeError("safetensors_torch writes host memory as is and needs a little-endian machine")

MAX_HEADER_BYTES = 100_000_000

# safetensors name -> (torch dtype, element size). More than Tessera reads, so that tests
# can write files with dtypes Tessera must refuse.
DTYPES = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "I16": (torch.int16, 2),
    "I8": (torch.int8, 1),
    "U8": (torch.uint8, 1),
    "BOOL": (torch.bool, 1),
}
NAMES = {dtype: name for name, (dtype, _) in DTYPES.items()}


def _tensor_bytes(tensor):
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: same bits as int16
        tensor = tensor.view(torch.int16)
    return tensor.numpy().tobytes()


def save(tensors, path, metadata=None):
    """Writes a dict name -> torch.Tensor (in its order) and optional str -> str metadata."""
    header = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    blobs = []
    offset = 0
    for name, tensor in tensors.items():
        if name == "__metadata__":
            raise ValueError("'__metadata__' cannot name a tensor")
        if tensor.dtype not in NAMES:
            raise ValueError(f"tensor '{name}': dtype {tensor.dtype} has no safetensors name here")
        blob = _tensor_bytes(tensor)
        header[name] = {"dtype": NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)


def _read_header(data, path):
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, too short for a safetensors file")
    (length,) = struct.unpack("<Q", data[:8])
    if length > MAX_HEADER_BYTES or length > len(data) - 8:
        raise ValueError(f"{path}: header length {length} is impossible for a {len(data)}-byte file")
    return json.loads(data[8:8 + length].decode("utf-8")), 8 + length


def load(path):
    """Returns a dict name -> torch.Tensor (CPU) in the header's order."""
    with open(path, "rb") as f:
        data = f.read()
    header, start = _read_header(data, path)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor '{name}': unsupported dtype {info['dtype']}")
        dtype, size = DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = info["shape"]
        numel = 1
        for extent in shape:
            numel *= extent
        if end - begin != numel * size or start + end > len(data):
            raise ValueError(f"{path}: tensor '{name}': data_offsets {info['data_offsets']} do not fit")
        if numel == 0:
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:
            tensors[name] = torch.frombuffer(bytearray(data[start + begin:start + end]), dtype=dtype).reshape(shape)
    return tensors


def load_metadata(path):
    """Returns the "__metadata__" dict (empty when absent)."""
    with open(path, "rb") as f:
        data = f.read()
    header, _ = _read_header(data, path)
    return dict(header.get("__metadata__", {}))
