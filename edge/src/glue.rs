//! The Worker's fetch handler: runtime glue only. It reads what the gate
//! needs from the request, and either answers with the core's problem or
//! forwards the request to the origin and hands back the origin's response
//! object itself, untouched.

use futures_util::StreamExt;
use idemkey_core::{KeyProfile, Problem};
use worker::js_sys::Uint8Array;
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{ByteStream, Context, Env, Error, Result, Url, console_error, event, web_sys};

use crate::gate::{HeadFields, OrderGate, ProblemReply, Route, forward_url};
use crate::selftest;

/// Seconds a client waits before retrying when the origin cannot be reached.
const ORIGIN_UNREACHABLE_RETRY_SECS: u64 = 1;

#[event(fetch)]
async fn fetch(req: web_sys::Request, env: Env, _ctx: Context) -> Result<web_sys::Response> {
    match handle(req, &env).await {
        Ok(response) => Ok(response),
        Err(err) => {
            // The origin could not be reached or the Worker is misconfigured:
            // whether a forwarded POST took effect is unknown, so the answer
            // is the core's 503 (retry with the same key).
            console_error!("idemkey-edge: {err}");
            problem_response(&Problem::service_unavailable(ORIGIN_UNREACHABLE_RETRY_SECS))
        }
    }
}

async fn handle(req: web_sys::Request, env: &Env) -> Result<web_sys::Response> {
    let url: Url = req
        .url()
        .parse()
        .map_err(|e| Error::RustError(format!("request URL: {e}")))?;
    let method = req.method();
    if url.path() == selftest::SELFTEST_PATH && method == "POST" && selftest_enabled(env) {
        return run_selftest(&req).await;
    }
    let origin = env.var("ORIGIN_URL")?.to_string();
    let target = forward_url(&origin, url.path(), url.query());
    match Route::of(&method, url.path()) {
        Route::CreateOrder => {
            let gate = OrderGate::new(key_profile(env)?);
            let fields = HeadFields::from_pairs(header_pairs(&req.headers()));
            if let Err(problem) = gate.check_head(&fields) {
                return problem_response(&problem);
            }
            let body = match read_limited(&req, &gate).await? {
                Ok(body) => body,
                Err(problem) => return problem_response(&problem),
            };
            if let Err(problem) = gate.check_body(&body) {
                return problem_response(&problem);
            }
            let body = Uint8Array::from(body.as_slice());
            forward(&req, &target, Some(body.into())).await
        }
        _ => {
            let body = req.body().map(JsValue::from);
            forward(&req, &target, body).await
        }
    }
}

fn selftest_enabled(env: &Env) -> bool {
    env.var("EDGE_SELFTEST")
        .map(|v| v.to_string() == "1")
        .unwrap_or(false)
}

fn key_profile(env: &Env) -> Result<KeyProfile> {
    match env.var("KEY_PROFILE") {
        Ok(value) => value
            .to_string()
            .parse()
            .map_err(|e| Error::RustError(format!("KEY_PROFILE: {e}"))),
        Err(_) => Ok(KeyProfile::default()),
    }
}

fn header_pairs(headers: &web_sys::Headers) -> Vec<(String, String)> {
    worker::Headers(headers.clone()).entries().collect()
}

/// Reads the body, stopping at the first chunk that takes it past the limit.
async fn read_limited(
    req: &web_sys::Request,
    gate: &OrderGate,
) -> Result<std::result::Result<Vec<u8>, Problem>> {
    let Some(stream) = req.body() else {
        return Ok(Ok(Vec::new()));
    };
    let mut stream = ByteStream::from(stream);
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if let Err(problem) = gate.check_received((body.len() + chunk.len()) as u64) {
            return Ok(Err(problem));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Ok(body))
}

/// Sends the request on to `target` with the same method, headers (less
/// `Host`, which names the edge) and body, without following redirects, and
/// returns the origin's response object as is.
async fn forward(
    req: &web_sys::Request,
    target: &str,
    body: Option<JsValue>,
) -> Result<web_sys::Response> {
    let headers = web_sys::Headers::new_with_headers(&req.headers())?;
    headers.delete("host")?;
    let init = web_sys::RequestInit::new();
    init.set_method(&req.method());
    init.set_headers(&headers);
    init.set_redirect(web_sys::RequestRedirect::Manual);
    if let Some(body) = body {
        init.set_body(&body);
    }
    let outgoing = web_sys::Request::new_with_str_and_init(target, &init)?;
    let global: web_sys::WorkerGlobalScope = worker::js_sys::global().unchecked_into();
    let response = JsFuture::from(global.fetch_with_request(&outgoing)).await?;
    Ok(response.dyn_into()?)
}

fn problem_response(problem: &Problem) -> Result<web_sys::Response> {
    let reply = ProblemReply::from(problem);
    let headers = web_sys::Headers::new()?;
    for (name, value) in &reply.headers {
        headers.append(name, value)?;
    }
    let init = web_sys::ResponseInit::new();
    init.set_status(reply.status);
    init.set_headers(&headers);
    Ok(web_sys::Response::new_with_opt_str_and_init(
        Some(&reply.body),
        &init,
    )?)
}

async fn run_selftest(req: &web_sys::Request) -> Result<web_sys::Response> {
    let body = JsFuture::from(req.array_buffer()?).await?;
    let bytes = Uint8Array::new(&body).to_vec();
    let (status, text) = match selftest::answer(&bytes) {
        Ok(answer) => (200, answer.to_string()),
        Err(message) => (400, message),
    };
    let headers = web_sys::Headers::new()?;
    headers.append("content-type", "application/json")?;
    let init = web_sys::ResponseInit::new();
    init.set_status(status);
    init.set_headers(&headers);
    Ok(web_sys::Response::new_with_opt_str_and_init(
        Some(&text),
        &init,
    )?)
}
