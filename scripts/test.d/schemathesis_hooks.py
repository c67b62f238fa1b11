"""Schemathesis hooks for scripts/test.d/70-schemathesis.sh (named by
`hooks` in schemathesis.toml).

Two narrow exceptions to "schema-valid request rejected" (ST202), each
dropping only that check's failure for a request shown, by the rule below,
not to be valid; every other failure, of every check, still fails the run:

1. A quantity written as a whole float (`4.0`): POST /orders (and
   /purchases, the same body) refuses it
   with 400 request-invalid (the shared vectors in core/vectors/orders.json
   require it, and NewOrder's description says so), but JSON Schema counts
   4.0 as an integer, so no schema can rule it out.
2. A path parameter or header whose value does not match the `pattern` the
   document gives it: Schemathesis 4.32.5's fuzzing phase sometimes labels
   such a value valid (seen with /operations/{key}: a display-string
   parameter holding raw non-ASCII characters, which the pattern refuses,
   as Python's `re` confirms), and the server's 400 is then the documented
   answer.
"""

import re
import sys

import schemathesis

QUANTITY_NOT_AN_INTEGER = [{"pointer": "/quantity", "detail": "must be an integer"}]


def _problem(response):
    try:
        problem = response.json()
    except ValueError:
        return {}
    return problem if isinstance(problem, dict) else {}


def _whole_float_quantity(case, problem):
    body = case.body
    quantity = body.get("quantity") if isinstance(body, dict) else None
    return (
        case.method.upper() == "POST"
        and case.path in ("/orders", "/purchases")
        and isinstance(quantity, float)
        and quantity.is_integer()
        and problem.get("code") == "request-invalid"
        and problem.get("errors") == QUANTITY_NOT_AN_INTEGER
    )


def _parameter_schemas(case):
    """(location, name, schema) of each parameter the operation declares."""
    document = case.operation.schema.raw_schema
    for parameter in case.operation.definition.raw.get("parameters", []):
        if "$ref" in parameter:
            target = document
            for part in parameter["$ref"].lstrip("#/").split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            parameter = target
        yield parameter.get("in"), parameter.get("name"), parameter.get("schema", {})


def _violates_a_pattern(case):
    sent = {"path": case.path_parameters or {}, "header": case.headers or {}}
    for location, name, schema in _parameter_schemas(case):
        values = sent.get(location)
        pattern = schema.get("pattern")
        if values is None or pattern is None:
            continue
        # Header names are case-insensitive.
        value = next((v for k, v in values.items() if k.lower() == name.lower()), None)
        if isinstance(value, str) and not re.search(pattern, value):
            return True
    return False


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """Keep every failure but the two ST202 cases described above."""
    if getattr(failure, "code", None) != "ST202" or response.status_code != 400:
        return True
    problem = _problem(response)
    if _whole_float_quantity(case, problem):
        reason = "a whole float quantity"
    elif problem.get("code") in ("idempotency-key-invalid", "request-invalid") and _violates_a_pattern(case):
        reason = "a value outside its documented pattern"
    else:
        return True
    # Said in the log, so a reader sees every failure that was set aside.
    print(f"schemathesis_hooks: set aside ST202 for {case.method.upper()} {case.path}: {reason}", file=sys.stderr)
    return False
