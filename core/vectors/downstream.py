"""Vectors of downstream_key(scope, operation, key, effect): the key an effect
outside the transaction (a charge) is sent with, computed here with Python's
hashlib and uuid, independently of the Rust code (core/src/downstream.rs).

Construction (v1): SHA-256 of the domain tag "idemkey/downstream-key/v1", then
each of scope, operation, key (the parsed key's characters) and effect as a
32-bit big-endian byte length followed by its UTF-8 bytes; the first 16 bytes
of the digest with the version nibble set to 8 and the variant to RFC 9562.
The instance keys (domain "idemkey/downstream-key/v2") add the instance as a
fifth part; the step keys (domain "idemkey/step-key/v1") hash the parts
scope, operation, key, instance (the flow id), step and action ("run" or
"compensate") the same way.
"""

import hashlib
import uuid

DOMAIN = "idemkey/downstream-key/v1"
# instance_downstream_key_of: one instance of an effect (one order's charge).
INSTANCE_DOMAIN = "idemkey/downstream-key/v2"
ORDER_1 = "5b0c7f4e-2a53-4c1e-9d8b-0f6a4e2d1c3b"
ORDER_2 = "9d2e4f60-7a1b-4c3d-8e5f-a6b7c8d9e0f1"
ACCOUNT = "0b8e3d4c-1f2a-4b5c-8d6e-7f8091a2b3c4"
OTHER_ACCOUNT = "5f0c2a1e-9b7d-4c3a-a2e1-0d9c8b7a6f5e"
ORDER_OP = "POST /orders:v1"
# step_downstream_key_of: one step (or its compensation) of one flow instance.
STEP_DOMAIN = "idemkey/step-key/v1"
FLOW_1 = "3f1c9a7e-5b2d-4e8f-a1c3-7d9e0b2f4a6c"
FLOW_2 = "c8d7e6f5-a4b3-4c2d-9e1f-0a9b8c7d6e5f"
CHECKOUT_OP = "POST /checkout:v1"


def derive(scope, operation, key, effect, *instance, domain=DOMAIN):
    data = domain.encode("utf-8")
    for part in (scope, operation, key, effect, *instance):
        raw = part.encode("utf-8")
        data += len(raw).to_bytes(4, "big") + raw
    digest = hashlib.sha256(data).digest()
    b = bytearray(digest[:16])
    b[6] = (b[6] & 0x0F) | 0x80
    b[8] = (b[8] & 0x3F) | 0x80
    return digest.hex(), str(uuid.UUID(bytes=bytes(b)))


def downstream_cases(article_key):
    """(name, scope, operation, key header, profile, parsed key, effect)."""
    up = article_key.upper()
    k255 = "k" * 255
    raw = [
        ("an order's charge: account, order operation, uuid key", ACCOUNT, ORDER_OP,
         f'"{article_key}"', "uuid", article_key, "charge"),
        ("the same key in capitals, bare, under uuid: the same parsed key, the same result",
         ACCOUNT, ORDER_OP, up, "uuid", article_key, "charge"),
        ("the same key under strict: the same characters, the same result", ACCOUNT, ORDER_OP,
         f'"{article_key}"', "strict", article_key, "charge"),
        ("another effect of the same order", ACCOUNT, ORDER_OP, f'"{article_key}"', "uuid",
         article_key, "ship"),
        ("another account with the same key", OTHER_ACCOUNT, ORDER_OP, f'"{article_key}"',
         "uuid", article_key, "charge"),
        ("another operation version", ACCOUNT, "POST /orders:v2", f'"{article_key}"', "uuid",
         article_key, "charge"),
        ("boundaries cannot shift: key ab, effect c", ACCOUNT, ORDER_OP, '"ab"', "strict", "ab",
         "c"),
        ("boundaries cannot shift: key a, effect bc", ACCOUNT, ORDER_OP, '"a"', "strict", "a",
         "bc"),
        ("empty scope and effect are hashed as zero lengths", "", "POST /x:v1", '"abc"',
         "strict", "abc", ""),
        ("non-ASCII scope and effect count UTF-8 bytes", "cuenta José 東京", "POST /x:v1",
         '"abc"', "strict", "abc", "cobro-ñ 🎉"),
        ("a bare key under lenient", ACCOUNT, ORDER_OP, "abc-123", "lenient", "abc-123",
         "charge"),
        ("escapes are undone before hashing", ACCOUNT, ORDER_OP, '"a\\"b\\\\c"', "strict",
         'a"b\\c', "charge"),
        ("a key of 255 characters", ACCOUNT, ORDER_OP, f'"{k255}"', "strict", k255, "charge"),
        ("parameters of the key field are ignored", ACCOUNT, ORDER_OP, '"abc";v=1', "strict",
         "abc", "charge"),
    ]
    out = []
    for name, scope, op, header, profile, key, effect in raw:
        digest, value = derive(scope, op, key, effect)
        out.append({"name": name, "scope": scope, "operation": op, "key_header": header,
                    "profile": profile, "key": key, "effect": effect, "sha256": digest,
                    "uuid": value})
    return out


def instance_cases(article_key):
    """instance_downstream_key_of(scope, operation, key, effect, instance)."""
    raw = [
        ("an order's charge: the order id is the instance", ACCOUNT, ORDER_OP, article_key,
         "charge", ORDER_1),
        ("the second order of a re-executed key: the same tuple, another order, another key",
         ACCOUNT, ORDER_OP, article_key, "charge", ORDER_2),
        ("the same order under another account", OTHER_ACCOUNT, ORDER_OP, article_key, "charge",
         ORDER_1),
        ("boundaries cannot shift: effect ab, instance c", ACCOUNT, ORDER_OP, "k", "ab", "c"),
        ("boundaries cannot shift: effect a, instance bc", ACCOUNT, ORDER_OP, "k", "a", "bc"),
        ("an empty instance is hashed as a zero length, unlike version 1", ACCOUNT, ORDER_OP,
         article_key, "charge", ""),
        ("non-ASCII instance counts UTF-8 bytes", ACCOUNT, ORDER_OP, "abc", "charge",
         "pedido-ñ 東京"),
    ]
    out = []
    for name, scope, op, key, effect, instance in raw:
        digest, value = derive(scope, op, key, effect, instance, domain=INSTANCE_DOMAIN)
        out.append({"name": name, "scope": scope, "operation": op, "key": key,
                    "effect": effect, "instance": instance, "sha256": digest, "uuid": value})
    return out


def step_cases(article_key):
    """step_downstream_key_of(scope, operation, key, instance, step, action):
    parts [scope, operation, key, instance, step, action] under STEP_DOMAIN."""
    k255 = "k" * 255
    raw = [
        ("a flow's external step, run: the flow id is the instance", ACCOUNT, CHECKOUT_OP,
         article_key, FLOW_1, "charge", "run"),
        ("the same step's compensation: never the run's key", ACCOUNT, CHECKOUT_OP,
         article_key, FLOW_1, "charge", "compensate"),
        ("another step of the same flow", ACCOUNT, CHECKOUT_OP, article_key, FLOW_1, "ship",
         "run"),
        ("the same step of a second flow of the same key (re-executed)", ACCOUNT, CHECKOUT_OP,
         article_key, FLOW_2, "charge", "run"),
        ("the same step under another account", OTHER_ACCOUNT, CHECKOUT_OP, article_key, FLOW_1,
         "charge", "run"),
        ("boundaries cannot shift: instance ab, step c", ACCOUNT, CHECKOUT_OP, "k", "ab", "c",
         "run"),
        ("boundaries cannot shift: instance a, step bc", ACCOUNT, CHECKOUT_OP, "k", "a", "bc",
         "run"),
        ("empty scope, instance and step are hashed as zero lengths; a one-character key",
         "", "POST /x:v1", "k", "", "", "compensate"),
        ("non-ASCII scope and step count UTF-8 bytes", "cuenta José 東京", CHECKOUT_OP, "abc",
         FLOW_1, "reservar-ñ 🎉", "compensate"),
        ("a key of 255 characters", ACCOUNT, CHECKOUT_OP, k255, FLOW_1, "charge", "run"),
    ]
    out = []
    for name, scope, op, key, instance, step, action in raw:
        digest, value = derive(scope, op, key, instance, step, action, domain=STEP_DOMAIN)
        out.append({"name": name, "scope": scope, "operation": op, "key": key,
                    "instance": instance, "step": step, "action": action, "sha256": digest,
                    "uuid": value})
    return out
