//! What a real `idemkey-server serve` sends for orders, against the schemas
//! of the `/openapi.json` it publishes: the 201 (and its replay), `GET
//! /orders/{id}`, `GET /orders`, the 409 `order-reference-exists` and the
//! catalogue's 400. Schemathesis checks responses against the document too
//! (scripts/test.d/70-schemathesis.sh); this keeps the order's new members
//! (reference, amount, currency, payment) and the two problems in the Rust
//! suite, with the exact bodies the core builds.

mod common;

use common::{Backend, Env, new_key};
use idemkey_core::{CURRENCY, Problem, unit_price};
use serde_json::{Value, json};

/// `instance` against `schema` for the subset of JSON Schema the document
/// uses (`$ref`, `allOf`, `oneOf`, `type`, `enum`, `const`, `required`,
/// `properties`, `items`, `minimum`, `format: uuid`); `at` names the place
/// in failure messages.
fn check(doc: &Value, schema: &Value, instance: &Value, at: &str) -> Result<(), String> {
    if let Some(target) = schema["$ref"].as_str() {
        let pointer = target.trim_start_matches('#');
        let resolved = doc.pointer(pointer).ok_or(format!("{at}: no {target}"))?;
        return check(doc, resolved, instance, at);
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        check(doc, part, instance, at)?;
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let fits = options
            .iter()
            .filter(|s| check(doc, s, instance, at).is_ok())
            .count();
        if fits != 1 {
            return Err(format!("{at}: {instance} fits {fits} of oneOf"));
        }
    }
    let kind = match instance {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if let Some(want) = schema["type"].as_str()
        && want != kind
    {
        return Err(format!("{at}: {instance} is not of type {want}"));
    }
    if let Some(options) = schema["enum"].as_array()
        && !options.contains(instance)
    {
        return Err(format!("{at}: {instance} is not one of {options:?}"));
    }
    if let Some(want) = schema.get("const")
        && want != instance
    {
        return Err(format!("{at}: {instance} is not {want}"));
    }
    if let (Some(least), Some(n)) = (schema["minimum"].as_i64(), instance.as_i64())
        && n < least
    {
        return Err(format!("{at}: {n} < {least}"));
    }
    if schema["format"] == "uuid" {
        let text = instance.as_str().unwrap_or_default();
        uuid::Uuid::try_parse(text).map_err(|_| format!("{at}: {instance} is not a uuid"))?;
    }
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap_or_default();
        if instance.get(name).is_none() {
            return Err(format!("{at}: {name} is required in {instance}"));
        }
    }
    if let (Some(properties), Some(members)) =
        (schema["properties"].as_object(), instance.as_object())
    {
        for (name, value) in members {
            if let Some(property) = properties.get(name) {
                check(doc, property, value, &format!("{at}/{name}"))?;
            }
        }
    }
    if let (Some(items), Some(values)) = (schema.get("items"), instance.as_array()) {
        for (i, value) in values.iter().enumerate() {
            check(doc, items, value, &format!("{at}/{i}"))?;
        }
    }
    Ok(())
}

/// `order` fits the document's `Order` and has no member it leaves out.
fn assert_order(doc: &Value, order: &Value) {
    let schema = &doc["components"]["schemas"]["Order"];
    check(doc, schema, order, "Order").unwrap();
    for name in order.as_object().unwrap().keys() {
        assert!(
            schema["properties"].get(name).is_some(),
            "{name} is sent but not documented"
        );
    }
}

/// The schema of `status` of `method path` in the document, resolved.
fn response_schema<'a>(doc: &'a Value, path: &str, method: &str, status: &str) -> &'a Value {
    let mut response = &doc["paths"][path][method]["responses"][status];
    if let Some(target) = response["$ref"].as_str() {
        response = doc.pointer(target.trim_start_matches('#')).unwrap();
    }
    let content = response["content"].as_object().unwrap();
    &content.values().next().unwrap()["schema"]
}

#[tokio::test]
async fn order_bodies_and_problems_are_what_the_document_says() {
    let env = Env::new(Backend::Sqlite);
    let token = env.account("bodies");
    let server = env.serve(&[]);
    let doc = server.get(&token, "/openapi.json").await.json();
    let post = async |key: &str, body: &str| server.post_order(&token, key, body).await;

    // A new order with a reference: 201, priced from the catalogue, payment
    // pending as at creation; its replay is the same bytes.
    let key = new_key();
    let body = r#"{"sku":"LIBRO-TS","quantity":2,"reference":"PO-bodies.1"}"#;
    let created = post(&key, body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let order = created.json();
    let schema = response_schema(&doc, "/orders", "post", "201");
    check(&doc, schema, &order, "201").unwrap();
    assert_order(&doc, &order);
    assert_eq!(order["amount_cents"], 2 * unit_price("LIBRO-TS").unwrap());
    assert_eq!(order["currency"], CURRENCY);
    assert_eq!(order["reference"], "PO-bodies.1");
    assert_eq!(
        order["payment"],
        json!({ "status": "pending", "attempts": 0 })
    );
    let replay = post(&key, body).await;
    assert_eq!((replay.status, &replay.body), (201, &created.body));
    let id = order["id"].as_str().unwrap().to_owned();

    // Read back, alone and in the list.
    let one = server.get(&token, &format!("/orders/{id}")).await;
    assert_eq!(one.status, 200, "{}", one.body);
    let schema = response_schema(&doc, "/orders/{id}", "get", "200");
    check(&doc, schema, &one.json(), "GET /orders/{id}").unwrap();
    assert_order(&doc, &one.json());
    let list = server.get(&token, "/orders").await;
    assert_eq!(list.status, 200, "{}", list.body);
    let schema = response_schema(&doc, "/orders", "get", "200");
    check(&doc, schema, &list.json(), "GET /orders").unwrap();

    // Without a reference there is no reference member.
    let plain = post(&new_key(), r#"{"sku":"TAZA-01","quantity":1}"#).await;
    assert_eq!(plain.status, 201, "{}", plain.body);
    assert_order(&doc, &plain.json());
    assert!(plain.json().get("reference").is_none(), "{}", plain.body);
    assert_eq!(plain.json()["amount_cents"], unit_price("TAZA-01").unwrap());

    // The same reference under another key: the core's 409, naming the order.
    let again = post(
        &new_key(),
        r#"{"sku":"A","quantity":1,"reference":"PO-bodies.1"}"#,
    )
    .await;
    again.assert_problem(409, "order-reference-exists");
    let schema = response_schema(&doc, "/orders", "post", "409");
    check(&doc, schema, &again.json(), "409").unwrap();
    let uuid = uuid::Uuid::parse_str(&id).unwrap();
    assert_eq!(again.body, Problem::order_reference_exists(uuid).to_json());

    // A well-formed sku outside the catalogue: the core's 400, pointer /sku.
    let unknown = post(&new_key(), r#"{"sku":"NOT-SOLD","quantity":1}"#).await;
    unknown.assert_problem(400, "request-invalid");
    let schema = response_schema(&doc, "/orders", "post", "400");
    check(&doc, schema, &unknown.json(), "400").unwrap();
    assert_eq!(unknown.body, Problem::sku_not_in_catalogue().to_json());
}

/// The checker refuses what it must, or the test above proves nothing.
#[test]
fn the_checker_refuses_bodies_outside_the_schema() {
    let doc: Value =
        serde_json::from_str(idemkey_server::operator::OPENAPI_TEMPLATE).expect("the document");
    let order = json!({ "id": "00000000-0000-4000-8000-000000000000", "sku": "A",
        "quantity": 1, "amount_cents": 100, "currency": "EUR",
        "created_at": "2026-12-03T12:00:00Z", "payment": { "status": "pending", "attempts": 0 } });
    let schema = &doc["components"]["schemas"]["Order"];
    check(&doc, schema, &order, "Order").unwrap();
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut copy = order.clone();
        edit(&mut copy);
        check(&doc, schema, &copy, "Order").is_err()
    };
    assert!(broken(&|o| {
        o.as_object_mut().unwrap().remove("payment");
    }));
    assert!(broken(&|o| o["id"] = json!("not-a-uuid")));
    assert!(broken(&|o| o["currency"] = json!("USD")));
    assert!(broken(&|o| o["amount_cents"] = json!(0)));
    assert!(broken(
        &|o| o["payment"] = json!({ "status": "charged", "attempts": 1 })
    ));
    assert!(broken(
        &|o| o["payment"] = json!({ "status": "lost", "attempts": 1 })
    ));
    assert!(!broken(&|o| {
        o["payment"] = json!({ "status": "charged", "attempts": 1, "charge_id": "ch_1" })
    }));
}

/// `GET /account` answers the account its token authenticates (what the
/// browser client scopes its keys by): each account's token gives
/// that account's own id, whatever it is called; no token, or one that
/// does not authenticate, gets the 401 problem.
#[tokio::test]
async fn account_is_the_tokens_own_account_and_needs_a_token() {
    let env = Env::new(Backend::Sqlite);
    let x = env.account("account-x");
    let y = env.account("account-y");
    let id_of = |name: &str| env.sql(&format!("SELECT id FROM accounts WHERE name = '{name}'"));
    let server = env.serve(&[]);
    let doc = server.get(&x, "/openapi.json").await.json();
    let schema = response_schema(&doc, "/account", "get", "200");
    for (token, name) in [(&x, "account-x"), (&y, "account-y")] {
        let reply = server.get(token, "/account").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        check(&doc, schema, &reply.json(), "GET /account").unwrap();
        assert_eq!(reply.json(), json!({ "id": id_of(name) }), "{name}");
    }
    assert_ne!(id_of("account-x"), id_of("account-y"));
    for token in ["", "not-a-token"] {
        let reply = server.get(token, "/account").await;
        reply.assert_problem(401, "unauthorized");
        let schema = response_schema(&doc, "/account", "get", "401");
        check(&doc, schema, &reply.json(), "401").unwrap();
    }
}
