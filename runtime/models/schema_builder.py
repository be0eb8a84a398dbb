"""A small builder for protobuf descriptors, so a schema can be declared without protoc."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import descriptor_pb2

PACKAGE = "inference"
_F = descriptor_pb2.FieldDescriptorProto
FieldProto = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING,
    "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
    "float": _F.TYPE_FLOAT,
    "double": _F.TYPE_DOUBLE,
}


def field(
    name: str, number: int, kind: str, *, repeated: bool = False, oneof: int | None = None
) -> FieldProto:
    """A field; ``kind`` is a scalar name, ``msg:Type`` or ``enum:Type`` (package-relative)."""
    proto = _F(name=name, number=number, json_name=name)
    proto.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if kind.startswith(("msg:", "enum:")):
        prefix, type_name = kind.split(":", 1)
        proto.type = _F.TYPE_MESSAGE if prefix == "msg" else _F.TYPE_ENUM
        proto.type_name = f".{PACKAGE}.{type_name}"
    else:
        proto.type = _SCALARS[kind]
    if oneof is not None:
        proto.oneof_index = oneof
    return proto


def enum(name: str, values: list[str]) -> descriptor_pb2.EnumDescriptorProto:
    enum = descriptor_pb2.EnumDescriptorProto(name=name)
    for number, value in enumerate(values):
        enum.value.add(name=value, number=number)
    return enum


def message(
    name: str,
    fields: list[FieldProto],
    *,
    nested: Sequence[descriptor_pb2.DescriptorProto] = (),
    enums: Sequence[descriptor_pb2.EnumDescriptorProto] = (),
    oneofs: Sequence[str] = (),
) -> descriptor_pb2.DescriptorProto:
    proto = descriptor_pb2.DescriptorProto(name=name)
    proto.field.extend(fields)
    proto.nested_type.extend(nested)
    proto.enum_type.extend(enums)
    for oneof in oneofs:
        proto.oneof_decl.add(name=oneof)
    return proto


def map_entry(name: str, key: str, value: str) -> descriptor_pb2.DescriptorProto:
    """The synthetic entry message protoc generates for ``map<key, value>``."""
    entry = message(name, [field("key", 1, key), field("value", 2, value)])
    entry.options.map_entry = True
    return entry


def map_field(parent: str, name: str, number: int, entry: str) -> FieldProto:
    return field(name, number, f"msg:{parent}.{entry}", repeated=True)
