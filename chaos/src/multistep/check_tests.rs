//! The `multi-step` checker on hand-made runs: a clean one passes, and
//! each broken promise is named.

use std::collections::BTreeMap;
use std::time::Duration;

use idemkey_core::{PURCHASE_OPERATION, StepAction};
use serde_json::json;

use super::check::{check, step_key};
use super::facts::{
    FlowRow, LogRow, MessageRow, ProviderEffect, RecordRow, ReservationRow, StepRow, StoreFacts,
};
use super::load::{Answer, Ask, Planned, PurchaseHistory, PurchaseRun};
use crate::driver::Account;

const ACCOUNT: &str = "0b8e3d4c-1f2a-4b5c-8d6e-7f8091a2b3c4";
const DONE: (&str, &str) = ("11111111-1111-4111-8111-111111111111", "f1");
const DECLINED: (&str, &str) = ("22222222-2222-4222-8222-222222222222", "f2");
const NO_STOCK: (&str, &str) = ("33333333-3333-4333-8333-333333333333", "f3");

fn key(which: (&str, &str), step: &str, action: StepAction) -> String {
    step_key(ACCOUNT, which.0, which.1, step, action).unwrap()
}

fn answer(ask: Ask, status: u16, body: &str, location: Option<&str>) -> Answer {
    Answer {
        ask,
        server: 0,
        status: Some(status),
        body: body.into(),
        location: location.map(str::to_owned),
        retry_after: None,
        error: None,
        timed_out: false,
        elapsed_ms: 1,
    }
}

fn done_body() -> String {
    json!({"id": "f1", "state": "done", "amount_cents": 990, "charge_id": "ch_1",
           "confirmation_id": "cf_1"})
    .to_string()
}

const DECLINED_BODY: &str = r#"{"code":"payment-declined","status":402}"#;
const NO_STOCK_BODY: &str = r#"{"code":"out-of-stock","status":409}"#;

fn run(which: (&str, &str), sku: &'static str, answers: Vec<Answer>) -> PurchaseRun {
    PurchaseRun {
        planned: Planned {
            account: 0,
            key: which.0.into(),
            sku,
            quantity: 1,
        },
        accepted: answers
            .last()
            .and_then(|a| a.status.map(|s| (s, a.body.clone()))),
        answers,
        stopped: None,
    }
}

fn history() -> PurchaseHistory {
    PurchaseHistory {
        accounts: vec![Account {
            id: ACCOUNT.into(),
            token: "t".into(),
        }],
        purchases: vec![
            run(
                DONE,
                "TAZA-01",
                vec![
                    answer(Ask::Post, 202, r#"{"id":"f1","state":"running"}"#, None),
                    answer(Ask::Post, 201, &done_body(), Some("/purchases/f1")),
                ],
            ),
            run(
                DECLINED,
                "DECLINE-TEST",
                vec![answer(Ask::Post, 402, DECLINED_BODY, Some("/purchases/f2"))],
            ),
            run(
                NO_STOCK,
                "TAZA-02",
                vec![answer(Ask::Post, 409, NO_STOCK_BODY, Some("/purchases/f3"))],
            ),
        ],
        elapsed: Duration::ZERO,
        lost_clients: Vec::new(),
    }
}

fn flow(
    which: (&str, &str),
    state: &str,
    failed: Option<&str>,
    status: i32,
    body: &str,
) -> FlowRow {
    FlowRow {
        id: which.1.into(),
        scope: ACCOUNT.into(),
        operation: PURCHASE_OPERATION.as_str().into(),
        key: which.0.into(),
        state: state.into(),
        failed_step: failed.map(str::to_owned),
        response_status: Some(status),
        response_body: Some(body.into()),
    }
}

fn effect(id: &str, key: String, order: &str, amount: Option<i64>) -> ProviderEffect {
    ProviderEffect {
        id: id.into(),
        key,
        order_id: order.into(),
        amount_cents: amount,
    }
}

fn log(seq: i64, kind: &str, effect: &str, key: String) -> LogRow {
    LogRow {
        seq,
        kind: kind.into(),
        effect: effect.into(),
        key,
        order_id: None,
    }
}

fn step(flow: &str, name: &str, state: &str, key: Option<&String>) -> StepRow {
    StepRow {
        flow_id: flow.into(),
        name: name.into(),
        state: state.into(),
        downstream_key: key.cloned(),
    }
}

fn facts() -> StoreFacts {
    let flows = vec![
        flow(DONE, "done", None, 201, &done_body()),
        flow(DECLINED, "failed", Some("charge"), 402, DECLINED_BODY),
        flow(NO_STOCK, "failed", Some("reserve"), 409, NO_STOCK_BODY),
    ];
    let records = flows
        .iter()
        .map(|f| RecordRow {
            scope: ACCOUNT.into(),
            key: f.key.clone(),
            status: "completed".into(),
            response_status: f.response_status,
            response_body: f.response_body.clone(),
            resource_id: Some(f.id.clone()),
        })
        .collect();
    let reservation = |id: &str, sku: &str, amount: i64, state: &str| ReservationRow {
        id: id.into(),
        account: ACCOUNT.into(),
        sku: sku.into(),
        quantity: 1,
        amount_cents: amount,
        state: state.into(),
    };
    let charge = key(DONE, "charge", StepAction::Run);
    let confirm = key(DONE, "confirm", StepAction::Run);
    let declined = key(DECLINED, "charge", StepAction::Run);
    StoreFacts {
        steps: vec![
            step("f1", "reserve", "done", None),
            step("f1", "charge", "done", Some(&charge)),
            step("f1", "confirm", "done", Some(&confirm)),
            step("f2", "reserve", "compensated", None),
            step("f2", "charge", "failed", Some(&declined)),
            step("f3", "reserve", "failed", None),
        ],
        flows,
        records,
        reservations: vec![
            reservation("f1", "TAZA-01", 990, "reserved"),
            reservation("f2", "DECLINE-TEST", 402, "released"),
        ],
        messages: vec![MessageRow {
            id: 1,
            resource_id: Some("f1".into()),
            status: "delivered".into(),
            attempts: 2,
            last_error: None,
        }],
        stock_before: BTreeMap::from([("TAZA-01".into(), 10), ("DECLINE-TEST".into(), 5)]),
        stock_after: BTreeMap::from([("TAZA-01".into(), 9), ("DECLINE-TEST".into(), 5)]),
        charges: vec![effect("ch_1", charge.clone(), "f1", Some(990))],
        confirmations: vec![effect("cf_1", confirm.clone(), "f1", None)],
        refunds: Vec::new(),
        log: vec![
            log(1, "request", "charges", charge.clone()),
            log(2, "charge", "charges", charge.clone()),
            log(3, "lookup", "charges", charge),
            log(4, "request", "confirmations", confirm.clone()),
            log(5, "confirmation", "confirmations", confirm),
            log(6, "request", "charges", declined),
        ],
        takeovers: BTreeMap::from([("flow-step".into(), 1)]),
    }
}

fn violations(history: &PurchaseHistory, facts: &StoreFacts) -> Vec<String> {
    check(history, facts).violations
}

fn has(v: &[String], text: &str) -> bool {
    v.iter().any(|m| m.contains(text))
}

#[test]
fn a_clean_run_passes_with_its_outcomes() {
    let checked = check(&history(), &facts());
    assert_eq!(checked.violations, Vec::<String>::new());
    assert_eq!(checked.outcomes["done"], 1);
    assert_eq!(checked.outcomes["declined"], 1);
    assert_eq!(checked.outcomes["out-of-stock"], 1);
    assert!(
        checked
            .figures
            .iter()
            .any(|f| f.contains("1 answers found by lookup"))
    );
}

#[test]
fn a_second_charge_a_refund_and_a_confirmation_of_a_declined_purchase_fail() {
    let mut f = facts();
    let twin = effect("ch_2", "other".into(), "f1", Some(990));
    f.charges.push(twin);
    f.refunds.push(effect("re_1", "r".into(), "f1", Some(990)));
    let confirm = key(DECLINED, "confirm", StepAction::Run);
    f.confirmations.push(effect("cf_2", confirm, "f2", None));
    let checked = check(&history(), &f);
    let v = &checked.violations;
    assert!(
        has(v, "ch_2 (key other, order f1) is no purchase's"),
        "{v:?}"
    );
    assert!(has(v, "refund re_1"), "{v:?}");
    assert!(
        has(v, "purchase f2 (declined): 0 charges and 1 confirmations"),
        "{v:?}"
    );
    assert_eq!(checked.duplicates, 3);
}

#[test]
fn a_client_answer_unlike_the_stored_one_fails() {
    let mut h = history();
    h.purchases[0].answers.push(answer(
        Ask::Get,
        200,
        r#"{"id":"f1","result_status":409,"result":{}}"#,
        None,
    ));
    let checked = check(&h, &facts());
    assert_eq!(checked.mismatched, 1);
    assert!(
        has(&checked.violations, "a client saw 409"),
        "{:?}",
        checked.violations
    );
    // A replay must be the stored bytes, not only the same JSON.
    let mut h = history();
    h.purchases[1].answers[0].body = DECLINED_BODY.replace(',', ", ");
    assert_eq!(check(&h, &facts()).mismatched, 1);
}

#[test]
fn stock_reservations_and_pending_messages_are_held_to_the_journal() {
    let mut f = facts();
    f.stock_after.insert("TAZA-01".into(), 8);
    f.reservations[1].state = "reserved".into();
    f.messages[0].status = "pending".into();
    f.flows[0].state = "running".into();
    let v = violations(&history(), &f);
    assert!(
        has(&v, "stock of TAZA-01: Some(8), 10 before and 1 reserved"),
        "{v:?}"
    );
    assert!(
        has(
            &v,
            "reservation f2 is reserved, its purchase Some(\"failed\")"
        ),
        "{v:?}"
    );
    assert!(has(&v, "step message 1 (purchase f1) is pending"), "{v:?}");
    assert!(has(&v, "execution f1 is still running"), "{v:?}");
}

#[test]
fn a_blind_resend_and_a_second_execution_fail() {
    let mut f = facts();
    let confirm = key(DONE, "confirm", StepAction::Run);
    f.log.push(log(7, "request", "confirmations", confirm));
    let mut again = f.flows[0].clone();
    again.id = "f9".into();
    f.flows.push(again);
    let v = violations(&history(), &f);
    assert!(has(&v, "confirmations: key"), "{v:?}");
    assert!(has(&v, "#7 sent again without a lookup"), "{v:?}");
    assert!(has(&v, "2 executions in the journal"), "{v:?}");
}

#[test]
fn wrong_outcomes_for_the_sku_and_an_unasked_decline_fail() {
    let mut h = history();
    h.purchases[1].planned.sku = "TAZA-01";
    let mut f = facts();
    f.log.pop();
    let v = violations(&h, &f);
    assert!(has(&v, "purchase f2 of TAZA-01: declined"), "{v:?}");
    assert!(has(&v, "charge asked at the provider: false"), "{v:?}");
}

#[test]
fn a_step_recorded_under_another_key_fails() {
    let mut f = facts();
    f.steps[1].downstream_key = Some("legacy".into());
    let v = violations(&history(), &f);
    assert!(has(&v, "purchase f1 (done): the journal records"), "{v:?}");
}
