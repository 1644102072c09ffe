"""The independent Avro side of tests/connector_registry.rs: Python's
fastavro for the Avro binary encoding and the standard library's urllib
for the registry's Confluent-compatible REST API, framed the Confluent way
(magic 0, 4-byte big-endian schema id, payload). No code shared with the
Rust side.

  fastavro_peer.py encode URL SUBJECT SCHEMA_FILE  < JSON lines  > hex lines
  fastavro_peer.py decode URL                      < hex lines   > JSON lines

With json-encode / json-decode the same for JSON Schema: the payload is
the JSON text (Python's json module), the schema registered with
schemaType JSON; both sides validate each value with Python's `jsonschema`
(an independent JSON Schema implementation) against the registry's schema,
and the decoder checks that the id names a JSON schema. A value that does
not validate fails the run.
"""
import io
import json
import struct
import sys
import urllib.request

import fastavro
import jsonschema

HEADERS = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def call(url, method="GET", body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=HEADERS)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def encode(url, subject, schema_file):
    text = open(schema_file).read()
    schema_id = call(f"{url}/subjects/{subject}/versions", "POST", {"schema": text})["id"]
    schema = fastavro.parse_schema(json.loads(text))
    for line in sys.stdin:
        if not line.strip():
            continue
        out = io.BytesIO()
        out.write(struct.pack(">bI", 0, schema_id))
        fastavro.schemaless_writer(out, schema, json.loads(line))
        print(out.getvalue().hex())


def decode(url):
    schemas = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        raw = bytes.fromhex(line.strip())
        magic, schema_id = struct.unpack(">bI", raw[:5])
        assert magic == 0, f"magic {magic}"
        if schema_id not in schemas:
            text = call(f"{url}/schemas/ids/{schema_id}")["schema"]
            schemas[schema_id] = fastavro.parse_schema(json.loads(text))
        record = fastavro.schemaless_reader(io.BytesIO(raw[5:]), schemas[schema_id], None)
        print(json.dumps(record))


def json_encode(url, subject, schema_file):
    text = open(schema_file).read()
    body = {"schema": text, "schemaType": "JSON"}
    schema_id = call(f"{url}/subjects/{subject}/versions", "POST", body)["id"]
    validator = jsonschema.validators.validator_for(json.loads(text))(json.loads(text))
    for line in sys.stdin:
        if line.strip():
            value = json.loads(line)
            validator.validate(value)
            payload = json.dumps(value, separators=(",", ":")).encode()
            print((struct.pack(">bI", 0, schema_id) + payload).hex())


def json_decode(url):
    validators = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        raw = bytes.fromhex(line.strip())
        magic, schema_id = struct.unpack(">bI", raw[:5])
        assert magic == 0, f"magic {magic}"
        if schema_id not in validators:
            answer = call(f"{url}/schemas/ids/{schema_id}")
            kind = answer.get("schemaType")
            assert kind == "JSON", f"schema {schema_id} is {kind}"
            schema = json.loads(answer["schema"])
            validators[schema_id] = jsonschema.validators.validator_for(schema)(schema)
        value = json.loads(raw[5:])
        validators[schema_id].validate(value)
        print(json.dumps(value))


if __name__ == "__main__":
    {"encode": encode, "decode": decode, "json-encode": json_encode, "json-decode": json_decode}[sys.argv[1]](
        *sys.argv[2:]
    )
