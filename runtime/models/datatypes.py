"""Datatype names across the three vocabularies: Triton config, KServe v2, ONNX Runtime."""

from __future__ import annotations

#: Triton ``TYPE_*`` -> KServe v2 datatype. TYPE_BF16 has no numpy form here, so it is absent.
CONFIG_TO_KSERVE: dict[str, str] = {
    "TYPE_BOOL": "BOOL",
    "TYPE_UINT8": "UINT8",
    "TYPE_UINT16": "UINT16",
    "TYPE_UINT32": "UINT32",
    "TYPE_UINT64": "UINT64",
    "TYPE_INT8": "INT8",
    "TYPE_INT16": "INT16",
    "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64",
    "TYPE_FP16": "FP16",
    "TYPE_FP32": "FP32",
    "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES",
}
KSERVE_TO_CONFIG: dict[str, str] = {kserve: config for config, kserve in CONFIG_TO_KSERVE.items()}

#: ONNX Runtime's ``NodeArg.type`` strings -> KServe v2 datatype.
ORT_TO_KSERVE: dict[str, str] = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}
