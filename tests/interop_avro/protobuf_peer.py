"""The independent Protobuf side of tests/connector_registry.rs: Google's
protobuf runtime for the messages and their JSON mapping, protoc (as shipped
in grpcio-tools) to compile the registry's .proto text, and the standard
library's urllib for the registry's Confluent-compatible REST API. The
Confluent framing (magic 0, 4-byte big-endian schema id, the zigzag-varint
message-index array, `0` for [0]) is written and read here on its own. No
code shared with the Rust side.

  protobuf_peer.py encode URL SUBJECT PROTO_FILE MESSAGE  < JSON lines > hex lines
  protobuf_peer.py decode URL                             < hex lines  > JSON lines

`encode` registers PROTO_FILE (schemaType PROTOBUF) under SUBJECT and writes
each JSON line as the message type MESSAGE (a full name, which may be a
nested or a later message: the index path is worked out from the file).
`decode` fetches each id's schema, compiles it with protoc and prints each
value as JSON: field names as in the .proto, fields with no presence
always printed, 64-bit integers as strings (the protobuf JSON mapping).
"""
import json
import os
import struct
import sys
import tempfile
import urllib.request

import grpc_tools
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from grpc_tools import protoc

HEADERS = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
WELL_KNOWN = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


def call(url, method="GET", body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=HEADERS)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def compile_proto(text):
    """The .proto text → (pool, its FileDescriptorProto)."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "schema.proto"), "w") as f:
            f.write(text)
        out = os.path.join(d, "set.pb")
        rc = protoc.main(
            ["protoc", f"-I{d}", f"-I{WELL_KNOWN}", "--include_imports", f"--descriptor_set_out={out}", "schema.proto"]
        )
        assert rc == 0, f"protoc failed ({rc})"
        fds = descriptor_pb2.FileDescriptorSet.FromString(open(out, "rb").read())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    return pool, fds.file[-1]


def zigzag(n, out):
    z = (n << 1) ^ (n >> 31)
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def read_zigzag(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos


def index_path(file_proto, full_name):
    """The Confluent message-index path of `full_name` in the file."""
    prefix = f"{file_proto.package}." if file_proto.package else ""

    def walk(types, scope, path):
        for i, t in enumerate(types):
            name = f"{scope}{t.name}"
            if name == full_name:
                return path + [i]
            found = walk(t.nested_type, f"{name}.", path + [i])
            if found:
                return found
        return None

    path = walk(file_proto.message_type, prefix, [])
    assert path, f"{full_name} is not in the schema"
    return path


def descriptor_at(pool, file_proto, path):
    prefix = f"{file_proto.package}." if file_proto.package else ""
    types, name = file_proto.message_type, prefix
    for i in path:
        t = types[i]
        name = f"{name}{t.name}"
        types = t.nested_type
        name += "."
    return pool.FindMessageTypeByName(name[:-1])


def encode(url, subject, proto_file, message):
    text = open(proto_file).read()
    schema_id = call(f"{url}/subjects/{subject}/versions", "POST", {"schema": text, "schemaType": "PROTOBUF"})["id"]
    pool, file_proto = compile_proto(text)
    path = index_path(file_proto, message)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(message))
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json_format.Parse(line, cls())
        out = bytearray(struct.pack(">bI", 0, schema_id))
        if path == [0]:
            out.append(0)
        else:
            zigzag(len(path), out)
            for i in path:
                zigzag(i, out)
        out += msg.SerializeToString()
        print(out.hex())


def decode(url):
    schemas = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        raw = bytes.fromhex(line.strip())
        magic, schema_id = struct.unpack(">bI", raw[:5])
        assert magic == 0, f"magic {magic}"
        if schema_id not in schemas:
            answer = call(f"{url}/schemas/ids/{schema_id}")
            assert answer.get("schemaType") == "PROTOBUF", f"schema {schema_id} is {answer.get('schemaType')}"
            schemas[schema_id] = compile_proto(answer["schema"])
        pool, file_proto = schemas[schema_id]
        count, pos = read_zigzag(raw, 5)
        path = [0]
        if count:
            path = []
            for _ in range(count):
                i, pos = read_zigzag(raw, pos)
                path.append(i)
        cls = message_factory.GetMessageClass(descriptor_at(pool, file_proto, path))
        msg = cls.FromString(raw[pos:])
        print(
            json.dumps(
                json_format.MessageToDict(
                    msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
                )
            )
        )


if __name__ == "__main__":
    {"encode": encode, "decode": decode}[sys.argv[1]](*sys.argv[2:])
