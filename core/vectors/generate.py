#!/usr/bin/env python3
"""Writes the shared test vectors of idemkey (keys, fingerprints, decisions,
retry steps, problems, order bodies, lookup states, replayed headers, HTTP
fingerprints, derived downstream and step keys) as JSON files beside this script
(the downstream keys' generator is downstream.py).

This is a second, independent statement of the contract: the expected values
below are written by hand (or computed here with Python's own json and
hashlib), never produced by the Rust code under test. The Rust, wasm and JS
tests all read the JSON files (README.md says which reads which);
`generate.py --check` (a step of scripts/test.sh) fails when the files are out
of date with this script, when a list is shorter than its minimum, or when a
JSON file here is not one this script writes. minimums.json carries the
minimums to every reader.
"""

import base64
import hashlib
import json
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the vectors
from downstream import DOMAIN as DOWNSTREAM_DOMAIN, INSTANCE_DOMAIN, STEP_DOMAIN, downstream_cases, instance_cases, step_cases  # noqa: E402

HERE = Path(__file__).resolve().parent
ARTICLE_KEY = "8e03978e-40d5-43e8-bc93-6894a57f9324"
K255 = "k" * 255


def ok(value):
    return {"ok": value}


def err(reason):
    code = "idempotency-key-missing" if reason == "missing" else "idempotency-key-invalid"
    return {"error": {"code": code, "reason": reason}}


# (name, field lines, {profile: expected})
def key_cases():
    q = f'"{ARTICLE_KEY}"'
    up = ARTICLE_KEY.upper()
    all3 = lambda e: {"strict": e, "lenient": e, "uuid": e}  # noqa: E731
    cases = [
        ("article key, quoted", [q], all3(ok(ARTICLE_KEY))),
        ("article key, bare", [ARTICLE_KEY],
         {"strict": err("syntax"), "lenient": ok(ARTICLE_KEY), "uuid": ok(ARTICLE_KEY)}),
        ("uppercase uuid, quoted", [f'"{up}"'],
         {"strict": ok(up), "lenient": ok(up), "uuid": ok(ARTICLE_KEY)}),
        ("uppercase uuid, bare", [up],
         {"strict": err("syntax"), "lenient": ok(up), "uuid": ok(ARTICLE_KEY)}),
        ("draft example random string", ['"clkyoesmbgybucifusbbtdsbohtyuuwz"'],
         {"strict": ok("clkyoesmbgybucifusbbtdsbohtyuuwz"),
          "lenient": ok("clkyoesmbgybucifusbbtdsbohtyuuwz"), "uuid": err("not-uuid")}),
        ("parameters are parsed and ignored", ['"abc";v=1;flag'],
         {"strict": ok("abc"), "lenient": ok("abc"), "uuid": err("not-uuid")}),
        ("uuid with a parameter", [f'{q};source=web'], all3(ok(ARTICLE_KEY))),
        ("leading and trailing spaces", ['   "abc"  '],
         {"strict": ok("abc"), "lenient": ok("abc"), "uuid": err("not-uuid")}),
        ("leading and trailing tabs (HTTP OWS)", ['\t"abc"\t'],
         {"strict": ok("abc"), "lenient": ok("abc"), "uuid": err("not-uuid")}),
        ("escaped quote and backslash", ['"a\\"b\\\\c"'],
         {"strict": ok('a"b\\c'), "lenient": ok('a"b\\c'), "uuid": err("not-uuid")}),
        ("inner space is allowed in an sf-string", ['"a b"'],
         {"strict": ok("a b"), "lenient": ok("a b"), "uuid": err("not-uuid")}),
        ("invalid escape", ['"a\\x"'], all3(err("syntax"))),
        ("unbalanced quote", ['"abc'], all3(err("syntax"))),
        ("trailing characters after the string", ['"abc"x'], all3(err("syntax"))),
        ("non-ASCII character", ['"café"'], all3(err("syntax"))),
        ("non-ASCII bare", ["café"], all3(err("syntax"))),
        ("tab inside the string", ['"a\tb"'], all3(err("syntax"))),
        ("control character inside the string", ['"a\u0001b"'], all3(err("syntax"))),
        ("empty string", ['""'], all3(err("empty"))),
        ("empty field value", [""], all3(err("empty"))),
        ("only spaces", ["   "], all3(err("empty"))),
        ("inner list", ['("a" "b")'], all3(err("syntax"))),
        ("list of two strings", ['"a", "b"'], all3(err("syntax"))),
        ("token", ["abc"], {"strict": err("syntax"), "lenient": ok("abc"), "uuid": err("not-uuid")}),
        ("integer", ["123"], {"strict": err("syntax"), "lenient": ok("123"), "uuid": err("not-uuid")}),
        ("byte sequence", [":YWJj:"],
         {"strict": err("syntax"), "lenient": ok(":YWJj:"), "uuid": err("not-uuid")}),
        ("boolean", ["?1"], {"strict": err("syntax"), "lenient": ok("?1"), "uuid": err("not-uuid")}),
        ("bare value with a comma", ["a,b"], all3(err("syntax"))),
        ("bare value with a semicolon", ["a;b"], all3(err("syntax"))),
        ("bare value with an inner space", ["a b"], all3(err("syntax"))),
        ("bare value with a quote inside", ['a"b'], all3(err("syntax"))),
        ("bare backslash is kept as is", ["a\\b"],
         {"strict": err("syntax"), "lenient": ok("a\\b"), "uuid": err("not-uuid")}),
        ("255 characters, quoted", [f'"{K255}"'],
         {"strict": ok(K255), "lenient": ok(K255), "uuid": err("not-uuid")}),
        ("255 characters, bare", [K255],
         {"strict": err("syntax"), "lenient": ok(K255), "uuid": err("not-uuid")}),
        ("256 characters, quoted", [f'"{K255}k"'],
         {"strict": err("too-long"), "lenient": err("too-long"), "uuid": err("not-uuid")}),
        ("256 characters, bare", [K255 + "k"],
         {"strict": err("syntax"), "lenient": err("too-long"), "uuid": err("not-uuid")}),
        ("uuid without hyphens", ['"8e03978e40d543e8bc936894a57f9324"'],
         {"strict": ok("8e03978e40d543e8bc936894a57f9324"),
          "lenient": ok("8e03978e40d543e8bc936894a57f9324"), "uuid": err("not-uuid")}),
        ("braced uuid", ['"{' + ARTICLE_KEY + '}"'],
         {"strict": ok("{" + ARTICLE_KEY + "}"), "lenient": ok("{" + ARTICLE_KEY + "}"),
          "uuid": err("not-uuid")}),
        ("uuid with a non-hex digit", ['"8e03978e-40d5-43e8-bc93-6894a57f932g"'],
         {"strict": ok("8e03978e-40d5-43e8-bc93-6894a57f932g"),
          "lenient": ok("8e03978e-40d5-43e8-bc93-6894a57f932g"), "uuid": err("not-uuid")}),
        ("no field line", [], all3(err("missing"))),
        ("two field lines, same value", [q, q], all3(err("repeated"))),
        ("two field lines, one empty", [q, ""], all3(err("repeated"))),
    ]
    out = []
    for name, lines, expect in cases:
        for profile in ("strict", "lenient", "uuid"):
            out.append({"name": name, "profile": profile, "lines": lines, **expect[profile]})
    return out


def canonical(value):
    # Python's json with these options writes exactly the documented canonical
    # form for the values used here (no floats in exponent form).
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint_cases():
    raw = [
        ("article body, article operation", "POST /pedidos:v1", '{"sku":"LIBRO-TS","cantidad":2}'),
        ("order body", "POST /orders:v1", '{"sku":"LIBRO-TS","quantity":2}'),
        ("order body, members reordered and spaced", "POST /orders:v1",
         '{ "quantity" : 2 ,\n  "sku" : "LIBRO-TS" }'),
        ("other quantity", "POST /orders:v1", '{"sku":"LIBRO-TS","quantity":3}'),
        ("same body, other operation version", "POST /orders:v2", '{"sku":"LIBRO-TS","quantity":2}'),
        ("nested objects are sorted at every level", "POST /x:v1",
         '{"z":{"b":1,"a":[{"d":true,"c":null}]},"a":"x"}'),
        ("unicode payload", "POST /x:v1", '{"name":"José Ñandú 東京 🎉","note":"línea\\nnueva"}'),
        ("escaped unicode reads as the same characters", "POST /x:v1",
         '{"name":"Jos\\u00e9"}'),
        ("control characters and quotes", "POST /x:v1", '{"s":"a\\u0001\\t\\"\\\\b\\u007f"}'),
        ("member names sort by code point", "POST /x:v1", '{"é":1,"z":2,"Z":3,"aa":4,"a":5}'),
        ("numbers", "POST /x:v1", '{"i":-12,"u":18446744073709551615,"f":2.5,"g":0.1}'),
        ("empty object", "POST /x:v1", "{}"),
        ("array payload", "POST /x:v1", '[3,2,1]'),
        ("string payload", "POST /x:v1", '"just a string"'),
        ("null payload", "POST /x:v1", "null"),
        ("duplicate member keeps the last value", "POST /x:v1", '{"a":1,"a":2}'),
    ]
    out = []
    for name, op, payload in raw:
        if name == "duplicate member keeps the last value":
            value = {"a": 2}
        else:
            value = json.loads(payload)
        canon = canonical([1, op, value])
        out.append({
            "name": name,
            "operation": op,
            "payload": payload,
            "canonical": canon,
            "hex": hashlib.sha256(canon.encode("utf-8")).hexdigest(),
        })
    # Floats whose canonical spelling differs between serializers: written by hand.
    for name, payload, canon_payload in [
        ("float with an exponent", '{"x":1e20}', '{"x":1e+20}'),
        ("float written with a trailing zero", '{"x":2.0}', '{"x":2.0}'),
    ]:
        canon = f'[1,"POST /x:v1",{canon_payload}]'
        out.append({
            "name": name, "operation": "POST /x:v1", "payload": payload, "canonical": canon,
            "hex": hashlib.sha256(canon.encode("utf-8")).hexdigest(),
        })
    return out


def decision_cases():
    # Fingerprints "A" and "B" stand for two different requests.
    A, B = "A", "B"
    cases = []

    def case(name, stored, request, now, policy, decision, problem=None):
        c = {"name": name, "stored": stored, "request": request, "now": now, "policy": policy,
             "decision": decision}
        if problem:
            c["problem"] = problem
        cases.append(c)

    nothing = {"state": "nothing"}
    done = {"state": "completed", "fingerprint": A, "replay_until": 10_000}
    tomb = {"state": "tombstone", "fingerprint": A}
    flight = {"state": "in_flight", "fingerprint": A, "lease_until": 10_000}
    for policy in ("reject", "reexecute"):
        case(f"nothing stored executes ({policy})", nothing, A, 0, policy, {"decision": "execute"})
        case(f"completed, same payload, in window replays ({policy})", done, A, 9_999, policy,
             {"decision": "replay"})
        case(f"completed, other payload is reuse ({policy})", done, B, 5_000, policy,
             {"decision": "reused"}, {"code": "idempotency-key-reused", "status": 422})
        case(f"completed, other payload after expiry is still reuse ({policy})", done, B, 99_000,
             policy, {"decision": "reused"}, {"code": "idempotency-key-reused", "status": 422})
        case(f"tombstone, other payload is reuse ({policy})", tomb, B, 99_000, policy,
             {"decision": "reused"}, {"code": "idempotency-key-reused", "status": 422})
        case(f"in flight, other payload is reuse ({policy})", flight, B, 5_000, policy,
             {"decision": "reused"}, {"code": "idempotency-key-reused", "status": 422})
        case(f"in flight, lease running: 409 with seconds left rounded up ({policy})", flight, A,
             7_500, policy, {"decision": "in_progress", "retry_after_secs": 3},
             {"code": "idempotency-request-in-progress", "status": 409, "retry_after": 3})
        case(f"in flight, last millisecond of the lease: at least 1 second ({policy})", flight, A,
             9_999, policy, {"decision": "in_progress", "retry_after_secs": 1},
             {"code": "idempotency-request-in-progress", "status": 409, "retry_after": 1})
        case(f"in flight, lease over: take over ({policy})", flight, A, 10_000, policy,
             {"decision": "take_over"})
    case("completed, same payload, at the deadline: expired (reject)", done, A, 10_000, "reject",
         {"decision": "expired"}, {"code": "idempotency-key-expired", "status": 410})
    case("completed, same payload, at the deadline: re-execute (reexecute)", done, A, 10_000,
         "reexecute", {"decision": "reexecute"})
    case("tombstone, same payload: expired (reject)", tomb, A, 0, "reject",
         {"decision": "expired"}, {"code": "idempotency-key-expired", "status": 410})
    case("tombstone, same payload: re-execute (reexecute)", tomb, A, 0, "reexecute",
         {"decision": "reexecute"})
    return cases


def lookup_cases():
    # LookupState::of(stored, now): what GET /operations/{key} reports.
    A = "A"
    cases = []

    def case(name, stored, now, state):
        cases.append({"name": name, "stored": stored, "now": now, "state": state})

    nothing = {"state": "nothing"}
    done = {"state": "completed", "fingerprint": A, "replay_until": 10_000}
    tomb = {"state": "tombstone", "fingerprint": A}
    flight = {"state": "in_flight", "fingerprint": A, "lease_until": 10_000}
    case("nothing stored: unknown", nothing, 0, "unknown")
    case("nothing stored, much later: still unknown", nothing, 99_000, "unknown")
    case("in flight, lease running: in progress", flight, 5_000, "in_progress")
    case("in flight, last millisecond of the lease: in progress", flight, 9_999, "in_progress")
    case("in flight, lease over: still in progress (no result stored)", flight, 10_000,
         "in_progress")
    case("in flight, long after the lease: still in progress", flight, 99_000, "in_progress")
    case("completed, in the window: completed", done, 0, "completed")
    case("completed, last millisecond of the window: completed", done, 9_999, "completed")
    case("completed, at the deadline: expired", done, 10_000, "expired")
    case("completed, after the window: expired", done, 99_000, "expired")
    case("tombstone: expired", tomb, 0, "expired")
    case("tombstone, much later: expired", tomb, 99_000, "expired")
    return cases


DEFAULT_REPLAY = ["content-type", "location"]
NEVER_REPLAYED = ["connection", "proxy-connection", "keep-alive", "transfer-encoding", "te",
                  "trailer", "upgrade", "proxy-authenticate", "proxy-authorization",
                  "content-length", "set-cookie", "date", "idempotent-replayed"]


def replay_header_cases():
    # is_replayed_header(header, allow): in allow (ASCII case-insensitive) and
    # never in NEVER_REPLAYED.
    cases = []

    def case(name, header, allow, replayed):
        want = (any(header.lower() == a for a in allow if header.isascii())
                and header.lower() not in NEVER_REPLAYED)
        assert want == replayed, name  # the hand-written answer and the rule agree
        cases.append({"name": name, "header": header, "allow": allow, "replayed": replayed})

    case("content-type is replayed by default", "content-type", DEFAULT_REPLAY, True)
    case("any letter case", "Content-Type", DEFAULT_REPLAY, True)
    case("location is replayed by default", "location", DEFAULT_REPLAY, True)
    case("location in capitals", "LOCATION", DEFAULT_REPLAY, True)
    case("etag is not replayed by default", "etag", DEFAULT_REPLAY, False)
    case("cache-control is not replayed by default", "Cache-Control", DEFAULT_REPLAY, False)
    case("a custom header is not replayed by default", "X-Request-Id", DEFAULT_REPLAY, False)
    case("a configured header is replayed", "ETag", DEFAULT_REPLAY + ["etag"], True)
    case("a configured custom header is replayed", "X-Order-Id", ["x-order-id"], True)
    case("an empty allowlist replays nothing", "content-type", [], False)
    case("a longer name is another header", "content-type-options", DEFAULT_REPLAY, False)
    case("a prefix is another header", "content", DEFAULT_REPLAY, False)
    case("the empty name", "", DEFAULT_REPLAY, False)
    case("non-ASCII is not folded", "LOCATİON", DEFAULT_REPLAY, False)
    for never in NEVER_REPLAYED:
        case(f"{never} is never replayed, even when allowed", never, DEFAULT_REPLAY + [never],
             False)
    case("never replayed in any letter case", "Set-Cookie", ["set-cookie", "content-type"], False)
    case("the replay marker in capitals", "Idempotent-Replayed", ["idempotent-replayed"], False)
    case("Transfer-Encoding in capitals", "TRANSFER-ENCODING", ["transfer-encoding"], False)
    return cases


def json_body(data):
    """(True, value) for a body that is JSON text, (False, None) when it is not:
    UTF-8 (no BOM), RFC 8259 (no NaN or Infinity), no lone surrogates, at
    most 127 nested arrays and objects (serde_json's limit of 128)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False, None

    def reject(constant):
        raise ValueError(constant)

    try:
        value = json.loads(text, parse_constant=reject)
    except ValueError:
        return False, None

    def fits(v, depth):
        if isinstance(v, (list, dict)):
            if depth + 1 > 127:
                return False
            items = v.values() if isinstance(v, dict) else v
            keys = v.keys() if isinstance(v, dict) else []
            return all(ok_str(k) for k in keys) and all(fits(i, depth + 1) for i in items)
        return ok_str(v) if isinstance(v, str) else True

    def ok_str(s):
        try:
            s.encode("utf-8")
            return True
        except UnicodeEncodeError:
            return False

    return (True, value) if fits(value, 0) else (False, None)


def is_json_media_type(ct):
    # application/json, any case, parameters allowed, charset only utf-8.
    parts = ct.split(";")
    if parts[0].strip(" \t").lower() != "application/json":
        return False
    for param in parts[1:]:
        if "=" not in param:
            return False
        name, val = param.split("=", 1)
        name, val = name.strip(" \t"), val.strip(" \t").strip('"')
        if name.lower() == "charset" and val.lower() != "utf-8":
            return False
    return True


def http_fingerprint_cases():
    J = "application/json"
    deep = lambda n: "[" * n + "]" * n  # noqa: E731
    raw = [
        # (name, operation, method, path, content type, body bytes)
        ("JSON body", "http:v1", "POST", "/payments", J, b'{"amount":500,"currency":"EUR","to":"acct_1"}'),
        ("JSON body, members reordered and spaced", "http:v1", "POST", "/payments", J,
         b'{ "to" : "acct_1",\n  "currency":"EUR" , "amount" : 500 }'),
        ("nested members are sorted at every level", "http:v1", "POST", "/payments", J,
         b'{"z":{"b":[{"d":true,"c":null}],"a":2.5},"a":"x"}'),
        ("JSON type in capitals with charset utf-8", "http:v1", "POST", "/payments",
         "Application/JSON; charset=UTF-8", b'{"amount":500,"currency":"EUR","to":"acct_1"}'),
        ("JSON type with another parameter", "http:v1", "POST", "/payments",
         "application/json; profile=x", b'{"amount":500}'),
        ("JSON in latin1 is bytes", "http:v1", "POST", "/payments",
         "application/json; charset=latin1", b'{"amount":500}'),
        ("a +json type is bytes", "http:v1", "POST", "/payments", "application/merge-patch+json",
         b'{"amount":500}'),
        ("JSON text as text/plain is bytes", "http:v1", "POST", "/payments", "text/plain",
         b'{"amount":500,"currency":"EUR","to":"acct_1"}'),
        ("JSON text with no content type is bytes", "http:v1", "POST", "/payments", None,
         b'{"amount":500,"currency":"EUR","to":"acct_1"}'),
        ("invalid JSON under a JSON type is bytes", "http:v1", "POST", "/payments", J,
         b'{"amount":'),
        ("trailing characters after JSON are bytes", "http:v1", "POST", "/payments", J, b"{} x"),
        ("a byte order mark before JSON is bytes", "http:v1", "POST", "/payments", J,
         b'\xef\xbb\xbf{"amount":500}'),
        ("NaN is not JSON", "http:v1", "POST", "/payments", J, b'{"amount":NaN}'),
        ("a lone surrogate escape is not JSON", "http:v1", "POST", "/payments", J,
         b'{"name":"\\ud800"}'),
        ("whitespace only under a JSON type is bytes", "http:v1", "POST", "/payments", J, b" \n"),
        ("empty body under a JSON type is null", "http:v1", "POST", "/payments", J, b""),
        ("empty body with no content type is null", "http:v1", "POST", "/payments", None, b""),
        ("JSON null is not an empty body", "http:v1", "POST", "/payments", J, b"null"),
        ("JSON scalar body", "http:v1", "POST", "/counter", J, b"42"),
        ("JSON string body", "http:v1", "POST", "/notes", J, b'"just text"'),
        ("JSON array body keeps its order", "http:v1", "POST", "/batch", J, b"[3,1,2]"),
        ("query string is part of the path", "http:v1", "POST", "/payments?currency=EUR&dry_run=1", J,
         b'{"amount":500}'),
        ("other query string", "http:v1", "POST", "/payments?currency=USD&dry_run=1", J,
         b'{"amount":500}'),
        ("percent-encoded path kept as received", "http:v1", "POST", "/files/a%20b?x=%C3%A9",
         "text/plain", b"hello"),
        ("other method, same body", "http:v1", "PATCH", "/payments", J,
         b'{"amount":500,"currency":"EUR","to":"acct_1"}'),
        ("other operation, same request", "http:v2", "POST", "/payments", J,
         b'{"amount":500,"currency":"EUR","to":"acct_1"}'),
        ("non-ASCII JSON is hashed as UTF-8 characters", "http:v1", "POST", "/people", J,
         '{"name":"José Ñandú 東京 🎉"}'.encode("utf-8")),
        ("escaped unicode reads as the same characters", "http:v1", "POST", "/people", J,
         b'{"name":"Jos\\u00e9 \\ud83c\\udf89"}'),
        ("non-ASCII text bytes (latin1) are bytes", "http:v1", "POST", "/notes",
         "text/plain; charset=latin1", "café".encode("latin-1")),
        ("invalid UTF-8 under a JSON type is bytes", "http:v1", "POST", "/notes", J,
         b'{"name":"caf\xe9"}'),
        ("binary body", "http:v1", "PUT", "/blobs/1", "application/octet-stream",
         bytes([0x00, 0xFF, 0xFE, 0x80, 0x7F, 0x0A, 0x3E, 0x3F])),
        ("one byte: two padding characters", "http:v1", "POST", "/b", None, b"a"),
        ("two bytes: one padding character", "http:v1", "POST", "/b", None, b"ab"),
        ("three bytes: no padding", "http:v1", "POST", "/b", None, b"abc"),
        ("JSON nested 127 deep is JSON", "http:v1", "POST", "/deep", J, deep(127).encode()),
        ("JSON nested 128 deep is bytes (serde_json's depth limit)", "http:v1", "POST", "/deep", J,
         deep(128).encode()),
    ]
    out = []
    for name, op, method, path, ct, data in raw:
        if not data:
            body = None
        else:
            is_json, value = json_body(data) if ct is not None and is_json_media_type(ct) else (False, None)
            if is_json:
                body = {"json": value}
            else:
                body = {"base64": base64.b64encode(data).decode("ascii")}
        canon = canonical([1, op, {"method": method, "path": path, "body": body}])
        c = {"name": name, "operation": op, "method": method, "path": path, "content_type": ct}
        try:
            c["body"] = data.decode("utf-8")
        except UnicodeDecodeError:
            c["body_hex"] = data.hex()
        c["canonical"] = canon
        c["hex"] = hashlib.sha256(canon.encode("utf-8")).hexdigest()
        out.append(c)
    return out


def retry_cases():
    # RetryPolicy::step_after(attempt, earlier, outcome, random). `earlier` says whether an
    # earlier attempt of the operation may have been applied; `mayHaveApplied` is
    # AttemptOutcome::may_have_applied of the case's outcome (what `earlier` becomes after it).
    policy = {"baseMs": 250, "capMs": 30_000, "maxAttempts": 8}
    cases = []

    def resp(s, ra=None, code=None):
        out = {"kind": "response", "status": s, "retryAfterMs": ra}
        if code is not None:
            out["code"] = code
        return out

    def may_have_applied(outcome):
        if outcome["kind"] == "networkError":
            return True
        s = outcome["status"]
        if s == 409:
            # A final code proves nothing was applied: a reference that exists (nothing stored),
            # a purchase out of stock (nothing reserved or charged; the key replays its 409).
            return outcome.get("code") not in FINAL_CODES
        if s in (408, 410):
            return True
        return not 400 <= s <= 499

    # The codes a client stops on (ProblemCode::is_final): a reference that exists, and every end
    # a purchase (a flow) can answer with, which the key replays.
    FINAL_CODES = ("order-reference-exists", "out-of-stock", "payment-declined", "operation-failed")

    def case(name, attempt, outcome, random, step, earlier="notApplied"):
        cases.append({"name": name, "attempt": attempt, "earlier": earlier, "outcome": outcome,
                      "random": random, "step": step, "mayHaveApplied": may_have_applied(outcome)})
    net = {"kind": "networkError"}
    case("201 is done", 1, resp(201), 0.5, {"action": "done"})
    case("replayed 201 is done", 3, resp(201), 0.5, {"action": "done"})
    case("network error, first attempt, full jitter under 250 ms", 1, net, 0.5,
         {"action": "wait", "delayMs": 125})
    case("network error, third attempt: ceiling 1000 ms", 3, net, 0.5,
         {"action": "wait", "delayMs": 500})
    case("network error, random 0 waits 0", 2, net, 0.0, {"action": "wait", "delayMs": 0})
    case("the ceiling doubles each attempt (16 s at attempt 7)", 7, net, 0.5, {"action": "wait", "delayMs": 8_000})
    case("409 honours Retry-After above the jitter", 1, resp(409, 2_000), 0.9,
         {"action": "wait", "delayMs": 2_000})
    case("503 jitter above Retry-After wins", 6, resp(503, 1_000), 0.5,
         {"action": "wait", "delayMs": 4_000})
    case("429 is retried", 1, resp(429), 0.0, {"action": "wait", "delayMs": 0})
    case("budget exhausted: reconcile", 8, net, 0.5, {"action": "reconcile"})
    case("budget exhausted on 503: reconcile", 8, resp(503, 1_000), 0.5, {"action": "reconcile"})
    case("410 reconciles at once", 1, resp(410), 0.5, {"action": "reconcile"})
    case("409 in progress, by its code, waits", 1, resp(409, 1_000, "idempotency-request-in-progress"),
         0.1, {"action": "wait", "delayMs": 1_000})
    case("409 order-reference-exists stops: no resend changes it", 1,
         resp(409, None, "order-reference-exists"), 0.5, {"action": "stop"})
    case("409 out-of-stock stops: the key replays the same 409, nothing was charged", 1,
         resp(409, None, "out-of-stock"), 0.5, {"action": "stop"})
    for status in (400, 404, 413, 415, 422, 501):
        case(f"{status} on a first attempt stops: the request must change", 1, resp(status), 0.5,
             {"action": "stop"})
    for status in (401, 403):
        case(f"{status} on a first attempt holds for sign-in: the credentials must change, not the request",
             1, resp(status), 0.5, {"action": "holdForAuth"})
    # After an attempt whose answer was lost (it may have committed), a refusal made before the
    # server reads the key's record proves nothing about that attempt.
    for status in (401, 403):
        case(f"{status} after an uncertain attempt holds for sign-in (same key afterwards)", 2,
             resp(status, code="unauthorized" if status == 401 else None), 0.5,
             {"action": "holdForAuth"}, "maybeApplied")
    for status, code in ((400, "request-invalid"), (404, "not-found"), (404, None), (405, None),
                         (413, "payload-too-large"), (415, "unsupported-media-type"),
                         (422, "idempotency-key-reused"), (418, None), (501, None)):
        label = f"{status} {code}" if code else str(status)
        case(f"{label} after an uncertain attempt is looked up, not ended", 2, resp(status, code=code),
             0.5, {"action": "reconcile"}, "maybeApplied")
    case("409 order-reference-exists after an uncertain attempt stops: nothing was stored", 2,
         resp(409, None, "order-reference-exists"), 0.5, {"action": "stop"}, "maybeApplied")
    case("409 out-of-stock after an uncertain attempt stops: the purchase ended, nothing charged", 2,
         resp(409, None, "out-of-stock"), 0.5, {"action": "stop"}, "maybeApplied")
    # A purchase's other ends are its key's stored answers too: waiting would resend to the end of
    # the budget, and a lookup names no answer.
    case("409 operation-failed stops: a step was refused and the steps before it undone", 1,
         resp(409, None, "operation-failed"), 0.5, {"action": "stop"})
    case("409 operation-failed after an uncertain attempt stops: the key replays it", 3,
         resp(409, None, "operation-failed"), 0.5, {"action": "stop"}, "maybeApplied")
    case("402 payment-declined after an uncertain attempt stops: the purchase ended, released", 2,
         resp(402, None, "payment-declined"), 0.5, {"action": "stop"}, "maybeApplied")
    case("409 without a code still waits (in progress)", 2, resp(409), 0.5,
         {"action": "wait", "delayMs": 250})
    case("network error after an uncertain attempt waits as before", 2, net, 0.5,
         {"action": "wait", "delayMs": 250}, "maybeApplied")
    case("201 after an uncertain attempt is done", 3, resp(201), 0.5, {"action": "done"}, "maybeApplied")
    case("429 refuses before anything runs", 1, resp(429, 1_000), 0.5, {"action": "wait", "delayMs": 1_000})
    case("408 may have run", 1, resp(408), 0.5, {"action": "wait", "delayMs": 125})
    return {"policy": policy, "cases": cases}


def unknown_cases():
    # RetryPolicy::after_unknown(attempt, first_sent_at, now, window, random): a lookup that
    # found no record is resent with the same key while now - first_sent_at < window (after the
    # policy's full-jitter backoff), and handed to the application from the window's end on.
    # Expected delays written by hand: floor(random * min(30000, 250 * 2^(attempt-1))).
    day = 86_400_000
    sent = 1_700_000_000_000
    cases = []

    def case(name, attempt, first_sent_at, now, window, random, step):
        cases.append({"name": name, "attempt": attempt, "firstSentAt": first_sent_at, "now": now,
                      "replayWindowMs": window, "random": random, "step": step})

    resend = lambda ms: {"action": "resend", "delayMs": ms}  # noqa: E731
    decide = {"action": "needsDecision"}
    case("unknown 20 s after the first send: resend the same key", 8, sent, sent + 20_000, day,
         0.5, resend(15_000))
    case("unknown right after one attempt: first backoff ceiling 250 ms", 1, sent, sent + 15_000,
         day, 0.5, resend(125))
    case("random 0 resends at once", 3, sent, sent + 60_000, day, 0.0, resend(0))
    case("last millisecond of the window: resend", 12, sent, sent + day - 1, day, 0.9,
         resend(27_000))
    case("at the end of the window: needs a decision", 12, sent, sent + day, day, 0.9, decide)
    case("a week later: needs a decision", 30, sent, sent + 7 * day, day, 0.1, decide)
    case("clock went backwards: counted as no time elapsed", 2, sent, sent - 5_000, day, 0.5,
         resend(250))
    case("short window (5 s), looked up after 4.999 s: resend", 1, 1_000, 5_999, 5_000, 0.5,
         resend(125))
    case("short window (5 s), looked up after 5 s: needs a decision", 1, 1_000, 6_000, 5_000,
         0.5, decide)
    case("a zero window always needs a decision", 1, sent, sent, 0, 0.5, decide)
    return {"policy": {"baseMs": 250, "capMs": 30_000, "maxAttempts": 8}, "cases": cases}


TITLES = {
    "idempotency-key-missing": (400, "Idempotency-Key is missing"),
    "idempotency-key-invalid": (400, "Idempotency-Key is invalid"),
    "idempotency-key-reused": (422, "Idempotency-Key reused with another payload"),
    "idempotency-request-in-progress": (409, "A request with this Idempotency-Key is in progress"),
    "idempotency-key-expired": (410, "Idempotency-Key expired"),
    "request-invalid": (400, "Request is invalid"),
    "payload-too-large": (413, "Payload too large"),
    "unsupported-media-type": (415, "Unsupported media type"),
    "unauthorized": (401, "Unauthorized"),
    "cross-site-request": (403, "Cross-site request refused"),
    "not-found": (404, "Not found"),
    "method-not-allowed": (405, "Method not allowed"),
    "service-unavailable": (503, "Service unavailable"),
    "order-reference-exists": (409, "An order with this reference exists"),
    "payment-declined": (402, "Payment declined"),
    "out-of-stock": (409, "Out of stock"),
    "operation-failed": (409, "Operation failed"),
}


def problem_body(code, detail, retry_after=None, lookup=None, errors=None, order=None):
    status, title = TITLES[code]
    body = {"type": f"/problems/{code}", "title": title, "status": status, "detail": detail,
            "code": code}
    if retry_after is not None:
        body["retry_after"] = retry_after
    if lookup is not None:
        body["lookup"] = lookup
    if order is not None:
        body["order"] = order
    if errors:
        body["errors"] = [{"pointer": p, "detail": d} for p, d in errors]
    # Member order is part of the contract: dicts keep insertion order.
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


DETAILS = {
    "in_progress": "A request with this Idempotency-Key is still being processed. Retry with the same key after Retry-After seconds.",
    "reused": "This Idempotency-Key was already used with a different request payload. Use a new key for a new operation; the original operation is unchanged.",
    "expired": "The replay window of this Idempotency-Key is over and the request was not executed again. Look the operation up instead of starting a new one.",
    "unavailable": "The request could not be completed or its outcome is not confirmed. Retry with the same Idempotency-Key.",
    "unauthorized": "Send a valid API token as Authorization: Bearer <token>.",
    "not_found": "No such resource exists for this account.",
    "cross_site": "This endpoint answers only requests from its own page on this host. Open the page served here instead of calling it from another site.",
    "media": "The request body must be sent as Content-Type: application/json.",
    "too_large": "The request body must be at most 8192 bytes.",
    "missing": "This operation requires an Idempotency-Key header.",
    "invalid_syntax": "The Idempotency-Key must be a structured-field string, e.g. \"8e03978e-40d5-43e8-bc93-6894a57f9324\".",
    "order_invalid": "The request body does not match the contract of POST /orders.",
    "reference_exists": "This account already has an order with this reference; its id is in the order member. Nothing was created: look that order up instead of sending the reference again.",
    "out_of_stock": "There is not enough stock of {sku} for this purchase. Nothing was charged: the reservation was not made. Sending it again with the same Idempotency-Key gets this answer again; a new purchase needs a new key.",
}

EXISTING_ORDER = "3f2b8c1d-6e4a-4f0b-9c7d-2a1e5b8f9d03"
PLAIN = [["content-type", "application/problem+json"], ["cache-control", "no-store"]]


def problem_cases():
    return {
        "codes": [{"code": c, "status": s, "title": t, "type": f"/problems/{c}"}
                  for c, (s, t) in TITLES.items()],
        "bodies": [
            {"name": "in progress, 3 s", "ctor": "in_progress", "retry_after": 3,
             "body": problem_body("idempotency-request-in-progress", DETAILS["in_progress"], 3),
             "headers": [["content-type", "application/problem+json"], ["cache-control", "no-store"],
                         ["retry-after", "3"]]},
            {"name": "key reused", "ctor": "key_reused",
             "body": problem_body("idempotency-key-reused", DETAILS["reused"]),
             "headers": [["content-type", "application/problem+json"], ["cache-control", "no-store"]]},
            {"name": "key expired with lookup", "ctor": "key_expired",
             "lookup": f"/operations/{ARTICLE_KEY}",
             "body": problem_body("idempotency-key-expired", DETAILS["expired"],
                                  lookup=f"/operations/{ARTICLE_KEY}"),
             "headers": [["content-type", "application/problem+json"], ["cache-control", "no-store"]]},
            {"name": "service unavailable, 1 s", "ctor": "service_unavailable", "retry_after": 1,
             "body": problem_body("service-unavailable", DETAILS["unavailable"], 1),
             "headers": [["content-type", "application/problem+json"], ["cache-control", "no-store"],
                         ["retry-after", "1"]]},
            {"name": "unauthorized", "ctor": "unauthorized",
             "body": problem_body("unauthorized", DETAILS["unauthorized"]),
             "headers": [["content-type", "application/problem+json"], ["cache-control", "no-store"]]},
            {"name": "cross-site request", "ctor": "cross_site_request",
             "body": problem_body("cross-site-request", DETAILS["cross_site"]),
             "headers": [["content-type", "application/problem+json"], ["cache-control", "no-store"]]},
            {"name": "not found", "ctor": "not_found",
             "body": problem_body("not-found", DETAILS["not_found"]),
             "headers": [["content-type", "application/problem+json"], ["cache-control", "no-store"]]},
            {"name": "unsupported media type", "ctor": "unsupported_media_type",
             "body": problem_body("unsupported-media-type", DETAILS["media"]),
             "headers": [["content-type", "application/problem+json"], ["cache-control", "no-store"]]},
            {"name": "payload too large, 8 KiB", "ctor": "payload_too_large", "limit": 8192,
             "body": problem_body("payload-too-large", DETAILS["too_large"]),
             "headers": [["content-type", "application/problem+json"], ["cache-control", "no-store"]]},
            {"name": "sku not in the catalogue", "ctor": "sku_not_in_catalogue",
             "body": problem_body("request-invalid", DETAILS["order_invalid"],
                                  errors=[("/sku", "is not in the catalogue")]),
             "headers": PLAIN},
            {"name": "order reference exists, naming the order", "ctor": "order_reference_exists",
             "order": EXISTING_ORDER,
             "body": problem_body("order-reference-exists", DETAILS["reference_exists"],
                                  order=EXISTING_ORDER),
             "headers": PLAIN},
            {"name": "payment declined with its reason", "ctor": "payment_declined",
             "reason": "amounts of 402 cents are declined",
             "body": problem_body("payment-declined",
                                  "The charge was declined: amounts of 402 cents are declined"),
             "headers": PLAIN},
            {"name": "out of stock, naming the sku", "ctor": "out_of_stock", "sku": "LIBRO-TS",
             "body": problem_body("out-of-stock", DETAILS["out_of_stock"].format(sku="LIBRO-TS")),
             "headers": PLAIN},
        ],
    }


ORDER_FINGERPRINT_OP = "POST /orders:v1"


def with_fingerprint(case):
    # A valid order's fingerprint is that of its validated members (the
    # canonical [1, operation, order]); an order without a reference keeps
    # the fingerprint orders had before references existed.
    if "ok" in case:
        canon = canonical([1, ORDER_FINGERPRINT_OP, case["ok"]])
        case["fingerprint"] = hashlib.sha256(canon.encode("utf-8")).hexdigest()
    return case


REF_RULE = "must be 1 to 64 characters from A-Z, a-z, 0-9, '.', '_' and '-'"


def order_cases():
    return [with_fingerprint(c) for c in order_case_list()]


def order_case_list():
    inv = lambda *errors: problem_body("request-invalid", DETAILS["order_invalid"],  # noqa: E731
                                       errors=list(errors))
    return [
        {"name": "valid order", "body": '{"sku":"LIBRO-TS","quantity":2}',
         "ok": {"sku": "LIBRO-TS", "quantity": 2}},
        {"name": "valid order, members reordered", "body": '{"quantity":20,"sku":"A-1"}',
         "ok": {"sku": "A-1", "quantity": 20}},
        {"name": "the article's Spanish member names are not this contract",
         "body": '{"sku":"LIBRO-TS","cantidad":2}',
         "problem": inv(("/quantity", "is required"), ("/cantidad", "is not allowed"))},
        {"name": "lowercase sku and zero quantity", "body": '{"sku":"libro","quantity":0}',
         "problem": inv(("/sku", "must be 1 to 32 characters from A-Z, 0-9 and -"),
                        ("/quantity", "must be from 1 to 20"))},
        {"name": "quantity 21", "body": '{"sku":"A","quantity":21}',
         "problem": inv(("/quantity", "must be from 1 to 20"))},
        {"name": "quantity as a string", "body": '{"sku":"A","quantity":"2"}',
         "problem": inv(("/quantity", "must be an integer"))},
        {"name": "quantity as a float", "body": '{"sku":"A","quantity":2.5}',
         "problem": inv(("/quantity", "must be an integer"))},
        {"name": "sku as a number", "body": '{"sku":7,"quantity":1}',
         "problem": inv(("/sku", "must be a string"))},
        {"name": "sku of 33 characters", "body": '{"sku":"' + "A" * 33 + '","quantity":1}',
         "problem": inv(("/sku", "must be 1 to 32 characters from A-Z, 0-9 and -"))},
        {"name": "extra members are listed, sorted", "body": '{"sku":"A","quantity":1,"z":1,"price":0}',
         "problem": inv(("/price", "is not allowed"), ("/z", "is not allowed"))},
        {"name": "a repeated member is refused, not last-one-wins",
         "body": '{"sku":"LIBRO-TS","quantity":2,"quantity":20}',
         "problem": inv(("/quantity", "must appear only once"))},
        {"name": "empty object", "body": "{}",
         "problem": inv(("/sku", "is required"), ("/quantity", "is required"))},
        {"name": "array instead of object", "body": "[]",
         "problem": inv(("", "must be a JSON object"))},
        {"name": "with a purchase reference",
         "body": '{"sku":"LIBRO-TS","quantity":2,"reference":"PO-1001"}',
         "ok": {"sku": "LIBRO-TS", "quantity": 2, "reference": "PO-1001"}},
        {"name": "reference of 64 characters, every allowed character class",
         "body": '{"reference":"' + "po_2026.01-Z" + "x" * 52 + '","sku":"A","quantity":1}',
         "ok": {"sku": "A", "quantity": 1, "reference": "po_2026.01-Z" + "x" * 52}},
        {"name": "reference of one character", "body": '{"sku":"A","quantity":1,"reference":"7"}',
         "ok": {"sku": "A", "quantity": 1, "reference": "7"}},
        {"name": "reference of 65 characters", "body": '{"sku":"A","quantity":1,"reference":"' + "R" * 65 + '"}',
         "problem": inv(("/reference", REF_RULE))},
        {"name": "empty reference", "body": '{"sku":"A","quantity":1,"reference":""}',
         "problem": inv(("/reference", REF_RULE))},
        {"name": "reference with a space", "body": '{"sku":"A","quantity":1,"reference":"PO 1001"}',
         "problem": inv(("/reference", REF_RULE))},
        {"name": "reference with a slash", "body": '{"sku":"A","quantity":1,"reference":"PO/1001"}',
         "problem": inv(("/reference", REF_RULE))},
        {"name": "reference with a non-ASCII letter", "body": '{"sku":"A","quantity":1,"reference":"PEDIDO-Ñ"}',
         "problem": inv(("/reference", REF_RULE))},
        {"name": "reference as a number", "body": '{"sku":"A","quantity":1,"reference":1001}',
         "problem": inv(("/reference", "must be a string"))},
        {"name": "reference null is not an absent reference", "body": '{"sku":"A","quantity":1,"reference":null}',
         "problem": inv(("/reference", "must be a string"))},
        {"name": "every member wrong: listed as sku, quantity, reference, unknown, repeated",
         "body": '{"sku":"a","quantity":0,"reference":"","x":1,"x":2}',
         "problem": inv(("/sku", "must be 1 to 32 characters from A-Z, 0-9 and -"),
                        ("/quantity", "must be from 1 to 20"), ("/reference", REF_RULE),
                        ("/x", "is not allowed"), ("/x", "must appear only once"))},
        {"name": "a repeated reference is refused",
         "body": '{"sku":"A","quantity":1,"reference":"a","reference":"b"}',
         "problem": inv(("/reference", "must appear only once"))},
    ]


def counted(description, cases, **extra):
    # `count` lets each reader check that it ran every case.
    return {"description": description, **extra, "count": len(cases), "cases": cases}


FILES = {
    "keys.json": lambda: {"description": "Idempotency-Key field lines per profile: the unquoted key, or the error code and reason.", "cases": key_cases()},
    "fingerprints.json": lambda: {"description": "SHA-256 of the canonical [1, operation, payload]; payload given as JSON text.", "version": 1, "cases": fingerprint_cases()},
    "decisions.json": lambda: {"description": "decide(stored, request, now, policy). Fingerprints A and B stand for two different requests; times in Unix ms.", "cases": decision_cases()},
    "lookups.json": lambda: counted("LookupState::of(stored, now): the state GET /operations/{key} reports. Fingerprint A stands for the stored request; times in Unix ms.", lookup_cases()),
    "replay_headers.json": lambda: {**counted("is_replayed_header(header, allow): whether a response header is stored and sent again on replay under the allowlist.", replay_header_cases()), "default": DEFAULT_REPLAY, "never": NEVER_REPLAYED},
    "http_fingerprints.json": lambda: counted("Fingerprint::of_http(operation, method, path, content_type, body): SHA-256 of the canonical [1, operation, {method, path, body}]; body is the UTF-8 text in `body`, or the bytes in `body_hex`.", http_fingerprint_cases(), version=1),
    "retry.json": lambda: {"description": "RetryPolicy::step_after(attempt, earlier, outcome, random) with the default policy; earlier is notApplied or maybeApplied (an earlier attempt of the operation may have been applied); mayHaveApplied is AttemptOutcome::may_have_applied(outcome).", **retry_cases()},
    "problems.json": lambda: {"description": "Every problem code with its status, title and type; exact bodies and headers of the problem constructors.", **problem_cases()},
    "orders.json": lambda: {"description": "POST /orders:v1 bodies: the validated order or the exact request-invalid problem body.", "cases": order_cases()},
    "downstream_keys.json": lambda: counted(f"downstream_key(scope, operation, key, effect): SHA-256 of the domain tag {DOWNSTREAM_DOMAIN!r} then each input as a u32 big-endian byte length and its UTF-8 bytes; the first 16 bytes as a UUIDv8 (version 8, RFC 9562 variant). `key` is what `key_header` parses to under `profile`; `sha256` is the whole digest.", downstream_cases(ARTICLE_KEY), domain=DOWNSTREAM_DOMAIN, instance_description="instance_downstream_key_of(scope, operation, key, effect, instance): the same construction under the domain tag `instance_domain` with `instance` (an order id) hashed as a fifth part; `key` is the stored key.", instance_domain=INSTANCE_DOMAIN, instance_cases=instance_cases(ARTICLE_KEY)),
    "step_keys.json": lambda: counted(f"step_downstream_key_of(scope, operation, key, instance, step, action): the key one step of one flow instance (action 'run') or its compensation (action 'compensate') is sent downstream with. SHA-256 of the domain tag {STEP_DOMAIN!r} then each of the six parts as a u32 big-endian byte length and its UTF-8 bytes; the first 16 bytes as a UUIDv8 (version 8, RFC 9562 variant); `key` is the stored key, `instance` the flow id, `sha256` the whole digest. Computed by core/vectors/downstream.py with Python's hashlib: d = hashlib.sha256({STEP_DOMAIN!r}.encode() + b''.join(len(p.encode()).to_bytes(4, 'big') + p.encode() for p in (scope, operation, key, instance, step, action))).digest(); b = bytearray(d[:16]); b[6] = b[6] & 0x0F | 0x80; b[8] = b[8] & 0x3F | 0x80; uuid = str(uuid.UUID(bytes=bytes(b))).", step_cases(ARTICLE_KEY), domain=STEP_DOMAIN),
    "unknown.json": lambda: {"description": "RetryPolicy::after_unknown(attempt, firstSentAt, now, replayWindowMs, random) with the default policy: what a client does when its operation's lookup answers unknown.", **unknown_cases()},
}


# The fewest cases each file (and each list in it) may hold. Every runtime
# that reads a file checks it ran at least this many (minimums.json), so a
# file emptied by hand, or a generator that lost cases, fails everywhere.
MINIMUMS = {
    "keys.json": {"cases": 126},
    "fingerprints.json": {"cases": 18},
    "decisions.json": {"cases": 22},
    "lookups.json": {"cases": 12},
    "replay_headers.json": {"cases": 30},
    "http_fingerprints.json": {"cases": 36},
    "retry.json": {"cases": 44},
    "problems.json": {"codes": 17, "bodies": 13},
    "orders.json": {"cases": 25},
    "downstream_keys.json": {"cases": 14, "instance_cases": 7},
    "step_keys.json": {"cases": 10},
    "unknown.json": {"cases": 10},
}


def minimums():
    return {
        "description": "The fewest entries each vector file's lists may hold; every reader checks it ran at least these.",
        "files": MINIMUMS,
    }


def short_lists(name, doc):
    """The lists of `doc` shorter than their minimum, as messages."""
    return [
        f"{name}: {key} has {len(doc.get(key, []))} entries, fewer than {least}"
        for key, least in MINIMUMS[name].items()
        if len(doc.get(key, [])) < least
    ]


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    missing = sorted(set(FILES) ^ set(MINIMUMS))
    if missing:
        print("vector files without a minimum, or minimums without a file:", ", ".join(missing))
        sys.exit(1)
    short = []
    outputs = {}
    for name, build in FILES.items():
        doc = build()
        short += short_lists(name, doc)
        outputs[name] = doc
    if short:
        print("vectors below their minimum case count:\n  " + "\n  ".join(short))
        sys.exit(1)
    outputs["minimums.json"] = minimums()
    known = set(outputs)
    strays = sorted(p.name for p in HERE.glob("*.json") if p.name not in known)
    if strays:
        print("JSON files generate.py does not write:", ", ".join(strays))
        sys.exit(1)
    for name, doc in outputs.items():
        text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
        path = HERE / name
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("stale vectors (run core/vectors/generate.py):", ", ".join(stale))
        sys.exit(1)


if __name__ == "__main__":
    main()
