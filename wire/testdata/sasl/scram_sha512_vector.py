#!/usr/bin/env python3
"""Independent SCRAM reference vectors for clink-kafka-wire's sasl::scram tests.

Computes the SCRAM client-final and server-final messages (RFC 5802) with only
Python's standard library (hashlib / hmac / base64), so the Rust implementation
is checked against code it shares nothing with.

Regenerate with:

    python3 wire/testdata/sasl/scram_sha512_vector.py

and paste the printed constants into the `python_vectors` section of the tests
in wire/src/sasl/scram.rs.

Like Kafka's own client (ScramFormatter), no SASLprep is applied: the password
is hashed as its UTF-8 bytes and the user name is only `=`/`,` escaped.
"""

import base64
import hashlib
import hmac


def saslname(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def scram(hash_name, user, password, client_nonce, server_nonce_suffix, salt,
          iterations, extensions=""):
    h = lambda data: hashlib.new(hash_name, data).digest()
    mac = lambda key, data: hmac.new(key, data, hash_name).digest()

    client_first_bare = f"n={saslname(user)},r={client_nonce}{extensions}"
    client_first = "n,," + client_first_bare
    nonce = client_nonce + server_nonce_suffix
    server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={iterations}"
    channel_binding = base64.b64encode(b"n,,").decode()  # "biws"
    client_final_without_proof = f"c={channel_binding},r={nonce}"
    auth_message = ",".join(
        [client_first_bare, server_first, client_final_without_proof]
    ).encode()

    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    client_key = mac(salted, b"Client Key")
    stored_key = h(client_key)
    client_signature = mac(stored_key, auth_message)
    proof = bytes(a ^ b for a, b in zip(client_key, client_signature))
    server_key = mac(salted, b"Server Key")
    server_signature = mac(server_key, auth_message)

    client_final = f"{client_final_without_proof},p={base64.b64encode(proof).decode()}"
    server_final = f"v={base64.b64encode(server_signature).decode()}"
    return client_first, server_first, client_final, server_final


def emit(prefix, values):
    for name, value in zip(["CLIENT_FIRST", "SERVER_FIRST", "CLIENT_FINAL", "SERVER_FINAL"], values):
        print(f'const {prefix}_{name}: &str = "{value}";')


# Vector 1: SCRAM-SHA-512, user name needing escaping, non-ASCII password.
print("// SCRAM-SHA-512: user \"k=afka,us=er\", password \"p\\u{e4}ss,w=rd\"")
emit("SHA512", scram(
    "sha512",
    user="k=afka,us=er",
    password="p\u00e4ss,w=rd",
    client_nonce="Zm9vYmFyYmF6cXV4MTIzNDU2",
    server_nonce_suffix="SeRvEr+n0nce/42",
    salt=bytes(range(1, 17)),
    iterations=4096,
))

# Vector 2: SCRAM-SHA-256 with Kafka's delegation-token extension.
print("// SCRAM-SHA-256 with tokenauth=true: user \"tokenid\", password \"tokenhmac\"")
emit("TOKEN", scram(
    "sha256",
    user="tokenid",
    password="tokenhmac",
    client_nonce="dG9rZW5ub25jZQ",
    server_nonce_suffix="srv-part",
    salt=b"kafka-salt",
    iterations=8192,
    extensions=",tokenauth=true",
))
