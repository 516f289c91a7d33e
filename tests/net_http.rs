//! Broker `net.http` from inside a real sandbox: one HTTP request made by
//! the supervisor under the run's allowlist, with a secret's handle in a
//! header replaced by its value only for the hosts the secret is bound to.
//! The test servers echo the request head back (body and an
//! `X-Echo-Authorization` header), so a value that leaked into the answer
//! would be seen; every file the run wrote, its audit, report and streams
//! are searched for the value too.

mod support;

use serde_json::{json, Value};
use support::net::{net_args, secret_client_run, NetRun, TestServer};
use support::{Project, Who};

/// The secret's value: distinctive, so any copy of it anywhere is found.
const VALUE: &str = "s3cr3t-VALUE-4f0c9e";

/// Gets the handle of secret TOKEN, prints it as `{"handle": ...}`, then
/// sends each `[method, params]` of argv[1] with `{HANDLE}` replaced by the
/// handle, printing each answer on a line and keeping them all in
/// `answers.json` in the project (a file the run wrote, searched later).
/// (After [`support::net::PY_BROKER`], which defines `call`.)
const CLIENT: &str = r#"
got = call(1, "secrets.get", {"name": "TOKEN"})
if "result" not in got:
    print(json.dumps(got)); sys.exit(1)
handle = got["result"]["handle"]
print(json.dumps({"handle": handle}), flush=True)
answers = []
for i, (method, params) in enumerate(json.loads(sys.argv[1]), 2):
    answer = call(i, method, json.loads(json.dumps(params).replace("{HANDLE}", handle)))
    answers.append(answer)
    print(json.dumps(answer), flush=True)
with open("answers.json", "w") as out:
    json.dump(answers, out)
"#;

struct HttpRun {
    run: NetRun,
    handle: String,
    answers: Vec<Value>,
}

/// One run of [`CLIENT`] with `requests`, the secret TOKEN bound to
/// `binding`, secrets.get granted, and the network `allow`/`resolve`.
fn http_run(
    project: &Project,
    binding: &str,
    allow: &[String],
    resolve: &[(&str, &str)],
    requests: &Value,
) -> HttpRun {
    let (run, mut lines) = secret_client_run(
        project,
        net_args(allow, resolve),
        binding,
        VALUE,
        CLIENT,
        requests,
    );
    assert!(!lines.is_empty(), "{}", run.streams());
    let handle = lines.remove(0)["handle"]
        .as_str()
        .unwrap_or_else(|| panic!("no handle: {}", run.streams()))
        .to_string();
    assert!(handle.starts_with("secret:TOKEN:"), "{handle}");
    HttpRun {
        run,
        handle,
        answers: lines,
    }
}

/// Panic if the value is anywhere the sandbox or its owner could read it
/// back: the streams, the audit, the report, any file in the project.
fn assert_value_nowhere(project: &Project, run: &NetRun) {
    assert!(!run.stdout().contains(VALUE), "stdout: {}", run.streams());
    assert!(!run.stderr().contains(VALUE), "stderr: {}", run.streams());
    assert!(!run.audit_text.contains(VALUE), "audit: {}", run.audit_text);
    assert!(
        !run.report_text.contains(VALUE),
        "report: {}",
        run.report_text
    );
    let mut stack = vec![project.path().to_path_buf()];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files += 1;
                let bytes = std::fs::read(&path).unwrap_or_default();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(VALUE),
                    "{} holds the secret's value",
                    path.display()
                );
            }
        }
    }
    assert!(files >= 1, "the answers were written");
}

fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error, got {answer}"))
}

/// `api.test` listed on a's port and pinned, with the address entry that
/// lets the loopback test server through.
fn listed(a: &TestServer) -> Vec<String> {
    vec![
        format!("api.test:{}", a.port()),
        format!("127.0.0.1:{}", a.port()),
    ]
}

#[test]
fn a_bound_secret_reaches_its_host_and_never_comes_back() {
    if !support::require_root_sandbox("a_bound_secret_reaches_its_host_and_never_comes_back") {
        return;
    }
    let project = Project::new(Who::Root);
    let a = TestServer::start("a");
    let url = format!("http://api.test:{}/echo?q=1", a.port());
    let result = http_run(
        &project,
        &format!("@api.test:{}", a.port()),
        &listed(&a),
        &[("api.test", "127.0.0.1")],
        &json!([["net.http", {
            "url": url,
            "method": "POST",
            "headers": {"Authorization": "Bearer {HANDLE}", "X-Plain": "visible"},
            "body": "payload"
        }]]),
    );
    let answer = &result.answers[0];
    let streams = result.run.streams();
    assert_eq!(answer["result"]["status"], 200, "{answer}\n{streams}");
    let body = answer["result"]["body"].as_str().unwrap_or_default();
    assert!(body.contains("server=a"), "{body}");
    assert!(body.starts_with("server=a\nPOST /echo?q=1 "), "{body}");
    // Header names are case-insensitive; the client may send them lower-cased.
    assert!(
        body.to_ascii_lowercase().contains("x-plain: visible"),
        "{body}"
    );
    assert!(
        body.contains(&format!("Bearer {}", result.handle)),
        "the echoed value comes back as the handle: {body}"
    );
    let echoed = answer["result"]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| {
            pair[0]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case("x-echo-authorization"))
        })
        .unwrap_or_else(|| panic!("no echo header: {answer}"));
    assert_eq!(echoed[1], format!("Bearer {}", result.handle), "{answer}");
    let seen = a.received();
    assert!(
        seen.contains(&format!("Bearer {VALUE}")),
        "the server got the real value: {seen}"
    );
    assert!(seen.ends_with("payload"), "{seen}");
    assert!(!seen.contains("secret:TOKEN:"), "never the handle: {seen}");
    assert_value_nowhere(&project, &result.run);
    let target = format!("api.test:{}", a.port());
    let audited = result.run.audited("net.http", &target);
    assert!(!audited.is_empty(), "{}", result.run.audit_text);
    assert_eq!(audited[0]["decision"], "allow", "{}", result.run.audit_text);
}

#[test]
fn a_secret_is_refused_where_it_is_not_bound_and_outside_headers() {
    if !support::require_root_sandbox(
        "a_secret_is_refused_where_it_is_not_bound_and_outside_headers",
    ) {
        return;
    }
    let project = Project::new(Who::Root);
    let a = TestServer::start("a");
    let b = TestServer::start("b");
    // Both hosts listed: only the secret's binding can refuse.
    let mut allow = listed(&a);
    allow.extend([
        format!("other.test:{}", b.port()),
        format!("127.0.0.1:{}", b.port()),
    ]);
    let (pa, pb) = (a.port(), b.port());
    let auth = json!({"Authorization": "Bearer {HANDLE}"});
    let result = http_run(
        &project,
        &format!("@api.test:{pa}"),
        &allow,
        &[("api.test", "127.0.0.1"), ("other.test", "127.0.0.1")],
        &json!([
            ["net.http", {"url": format!("http://other.test:{pb}/stolen"), "headers": auth.clone()}],
            ["net.http", {"url": format!("http://api.test:{pa}/?token={{HANDLE}}")}],
            ["net.http", {"url": format!("http://api.test:{pa}/body"), "method": "POST", "body": "token={HANDLE}"}],
            ["net.http", {"url": format!("http://other.test:{pb}/plain")}],
        ]),
    );
    let answers = &result.answers;
    let streams = result.run.streams();
    assert_eq!(error_code(&answers[0]), -32001, "unbound host: {streams}");
    let message = answers[0]["error"].to_string();
    assert!(message.contains("TOKEN"), "names the secret: {message}");
    assert_eq!(
        error_code(&answers[1]),
        -32001,
        "handle in the URL: {streams}"
    );
    assert_eq!(
        error_code(&answers[2]),
        -32001,
        "handle in the body: {streams}"
    );
    assert_eq!(
        answers[3]["result"]["status"], 200,
        "other.test itself is listed: {streams}"
    );
    a.assert_saw_nothing("a handle outside the headers is never sent");
    let seen = b.received();
    assert!(!seen.contains("/stolen"), "{seen}");
    assert!(
        !seen.contains(VALUE) && !seen.contains("secret:TOKEN"),
        "{seen}"
    );
    assert_value_nowhere(&project, &result.run);

    // A secret bound to no host is refused everywhere.
    let unbound = http_run(
        &project,
        "",
        &listed(&a),
        &[("api.test", "127.0.0.1")],
        &json!([["net.http", {"url": format!("http://api.test:{pa}/unbound"), "headers": auth.clone()}]]),
    );
    assert_eq!(
        error_code(&unbound.answers[0]),
        -32001,
        "an unbound secret: {}",
        unbound.run.streams()
    );
    a.assert_saw_nothing("an unbound secret is never sent");
    assert_value_nowhere(&project, &unbound.run);
}

#[test]
fn net_http_is_refused_for_unlisted_hosts_ip_literals_and_metadata() {
    if !support::require_root_sandbox(
        "net_http_is_refused_for_unlisted_hosts_ip_literals_and_metadata",
    ) {
        return;
    }
    let project = Project::new(Who::Root);
    let a = TestServer::start("a");
    let c = TestServer::start("c");
    let raw = TestServer::start_on("raw", "127.0.0.2");
    let mut allow = listed(&a);
    allow.extend([format!("127.0.0.1:{}", c.port()), "meta.test".to_string()]);
    let result = http_run(
        &project,
        &format!("@api.test:{}", a.port()),
        &allow,
        &[
            ("api.test", "127.0.0.1"),
            ("unlisted.test", "127.0.0.1"),
            ("meta.test", "169.254.169.254"),
        ],
        &json!([
            ["net.http", {"url": format!("http://unlisted.test:{}/", c.port())}],
            ["net.http", {"url": format!("http://{}/", raw.addr())}],
            ["net.http", {"url": "http://meta.test/latest/meta-data/", "timeout_ms": 5000}],
        ]),
    );
    let streams = result.run.streams();
    let unlisted = error_code(&result.answers[0]);
    assert!(
        unlisted == -32001 || unlisted == -32002,
        "nobody to ask: {streams}"
    );
    assert_eq!(error_code(&result.answers[1]), -32001, "raw IP: {streams}");
    assert_eq!(
        error_code(&result.answers[2]),
        -32001,
        "metadata: {streams}"
    );
    assert!(
        result.answers[2]["error"]
            .to_string()
            .contains("169.254.169.254"),
        "names the address: {}",
        result.answers[2]
    );
    c.assert_saw_nothing("unlisted host");
    raw.assert_saw_nothing("raw IP");
    for target in [format!("unlisted.test:{}", c.port()), raw.addr()] {
        let lines = result.run.audited("net.http", &target);
        assert!(!lines.is_empty(), "{target}: {}", result.run.audit_text);
        assert_eq!(
            lines[0]["decision"], "deny",
            "{target}: {}",
            result.run.audit_text
        );
    }
}

#[test]
fn net_http_cuts_a_body_at_max_bytes_and_says_so() {
    if !support::require_root_sandbox("net_http_cuts_a_body_at_max_bytes_and_says_so") {
        return;
    }
    let project = Project::new(Who::Root);
    let a = TestServer::start("a");
    let pa = a.port();
    let result = http_run(
        &project,
        &format!("@api.test:{pa}"),
        &listed(&a),
        &[("api.test", "127.0.0.1")],
        &json!([
            ["net.http", {"url": format!("http://api.test:{pa}/size/100000"), "max_bytes": 1000}],
            ["net.http", {"url": format!("http://api.test:{pa}/size/1000"), "max_bytes": 1000}],
            // The largest cap on a body larger than the broker's 1 MiB
            // answer line: the answer must still fit.
            ["net.http", {"url": format!("http://api.test:{pa}/size/2000000"), "max_bytes": 655360}],
            ["net.http", {"url": format!("http://api.test:{pa}/size/10"), "max_bytes": 655361}],
        ]),
    );
    let streams = result.run.streams();
    let cut = &result.answers[0]["result"];
    assert_eq!(cut["status"], 200, "{streams}");
    assert_eq!(cut["truncated"], true, "{streams}");
    assert_eq!(cut["body"].as_str().unwrap().len(), 1000, "{streams}");
    let whole = &result.answers[1]["result"];
    assert_eq!(whole["body"].as_str().unwrap().len(), 1000, "{streams}");
    assert!(
        whole.get("truncated").is_none() || whole["truncated"] == false,
        "exactly max_bytes is not cut: {streams}"
    );
    let largest = &result.answers[2]["result"];
    assert_eq!(largest["truncated"], true, "{streams}");
    assert_eq!(
        largest["body"].as_str().map(str::len),
        Some(655360),
        "{streams}"
    );
    let over = &result.answers[3]["error"];
    assert!(
        over["message"]
            .as_str()
            .is_some_and(|m| m.contains("max_bytes")),
        "a cap over the limit is refused naming it: {streams}"
    );
}
