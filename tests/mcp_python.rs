//! `sandbox serve --mcp` driven by a real MCP client, not one of ours: the
//! official Python SDK (tests/mcp/), started the way an agent host starts
//! a server. Every scenario runs in both protocol eras the SDK offers, the
//! `initialize` handshake (2025-11-25) and `server/discover` (2026-07-28),
//! side by side in threads.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use support::mcp_client::{self, Era, Observed};

/// What a test needs before it can start: a sandbox that runs at all and
/// the SDK's venv; a loud skip otherwise.
fn client(test: &str) -> Option<PathBuf> {
    static SANDBOX_RUNS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let runs = *SANDBOX_RUNS.get_or_init(|| {
        let project = project();
        Command::new(support::sandbox_bin())
            .args(["run", "--project"])
            .arg(project.path())
            .args(["--", "/bin/true"])
            .output()
            .expect("sandbox starts")
            .status
            .success()
    });
    if !support::require(test, "a working sandbox", runs) {
        return None;
    }
    mcp_client::python(test)
}

fn project() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-mcp-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

fn examples() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("skills")
        .to_str()
        .expect("UTF-8 checkout path")
        .to_owned()
}

/// A Python skill answering each call with `body`, an expression of `p`
/// (the params) and `client` (the broker).
fn python_skill(body: &str) -> String {
    format!(
        "import os, time\nimport sandbox_ipc\nclient = sandbox_ipc.connect()\n\
         def handle(p):\n    {body}\nclient.serve(handle)\n"
    )
}

/// Run `check` for each era, in parallel; a failure names its era.
fn each_era(check: impl Fn(Era) + Sync) {
    let check = &check;
    std::thread::scope(|scope| {
        let runs: Vec<_> = Era::ALL
            .iter()
            .map(|&era| (era, scope.spawn(move || check(era))))
            .collect();
        let failed: Vec<Era> = runs
            .into_iter()
            .filter_map(|(era, run)| run.join().is_err().then_some(era))
            .collect();
        assert!(
            failed.is_empty(),
            "failed in the eras {failed:?} (see above)"
        );
    });
}

/// One scenario against `serve --mcp --project PROJECT EXTRA...`, from the
/// project directory with a private HOME; the session must have reached
/// `era`'s protocol version and the scenario must have run to its end.
fn serve(
    python: &Path,
    era: Era,
    scenario: &str,
    spec: Value,
    project: &Path,
    extra: &[&str],
) -> Observed {
    let home = tempfile::tempdir().expect("home");
    let project_arg = project.to_str().expect("UTF-8 temp path");
    let mut args = vec!["--project", project_arg];
    args.extend_from_slice(extra);
    let seen = mcp_client::run_scenario(python, era, scenario, &spec, project, home.path(), &args);
    assert!(
        seen.json.get("error").is_none(),
        "{scenario} ({era:?}) failed:\n{}",
        seen.context()
    );
    assert_eq!(
        seen.json["protocol_version"],
        era.version(),
        "{scenario} ({era:?}) negotiated another version:\n{}",
        seen.context()
    );
    seen
}

fn tool<'a>(seen: &'a Observed, name: &str) -> &'a Value {
    seen.json["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == name))
        .unwrap_or_else(|| panic!("no tool {name}:\n{}", seen.context()))
}

fn call(seen: &Observed, index: usize) -> &Value {
    &seen.json["calls"][index]
}

/// A successful call: not an error, with an object as structured content
/// that the text says too (for clients that read only text).
fn assert_success(seen: &Observed, index: usize) -> &Value {
    let answer = call(seen, index);
    assert_eq!(
        answer["isError"],
        false,
        "call {index} failed:\n{}",
        seen.context()
    );
    let structured = &answer["structuredContent"];
    assert!(
        structured.is_object(),
        "call {index}: structured content {structured}:\n{}",
        seen.context()
    );
    structured
}

/// A failed call: a tool result with isError (not a protocol error) whose
/// text contains each of `words`.
fn assert_tool_error(seen: &Observed, index: usize, words: &[&str]) {
    let answer = call(seen, index);
    assert_eq!(
        answer["isError"],
        true,
        "call {index} should be a tool error:\n{}",
        seen.context()
    );
    let text = answer["text"].as_str().unwrap_or_default().to_lowercase();
    for word in words {
        assert!(
            text.contains(&word.to_lowercase()),
            "call {index}: {word:?} is not in {text:?}:\n{}",
            seen.context()
        );
    }
}

#[test]
fn the_tools_are_the_skills_with_their_schemas_and_annotations() {
    let test = "mcp_python::the_tools_are_the_skills";
    let Some(python) = client(test) else { return };
    let project = project();
    support::write_skill(
        project.path(),
        "remover",
        "permissions: [fs.delete]\n",
        (
            "main.py",
            &python_skill("return client.fs.delete(p['path'])"),
        ),
    );
    let examples = examples();
    each_era(|era| {
        let seen = serve(
            &python,
            era,
            "list",
            json!({}),
            project.path(),
            &["--skills-dir", &examples],
        );
        let wordcount = tool(&seen, "wordcount");
        let description = wordcount["description"].as_str().unwrap_or_default();
        assert!(
            description.contains("Counts the lines, words and characters of a project file"),
            "{description}"
        );
        // What the sandbox lets it do: the actions it may ask the broker for.
        assert!(description.contains("fs.read"), "{description}");
        assert_eq!(
            wordcount["inputSchema"],
            json!({
                "type": "object",
                "properties": {"path": {"type": "string", "minLength": 1}},
                "required": ["path"]
            })
        );
        assert!(wordcount.get("outputSchema").is_none(), "{wordcount}");
        // It declares only reading, and strict has no network.
        assert_eq!(
            wordcount["annotations"]["readOnlyHint"], true,
            "{wordcount}"
        );
        assert_ne!(
            wordcount["annotations"]["openWorldHint"], true,
            "{wordcount}"
        );
        assert_eq!(tool(&seen, "shout")["annotations"]["readOnlyHint"], true);

        let files = tool(&seen, "files");
        assert_eq!(
            files["inputSchema"]["properties"]["op"],
            json!({"enum": ["read", "write", "list"]})
        );
        assert_eq!(files["inputSchema"]["required"], json!(["op", "path"]));
        // It writes (below out/) but deletes nothing and runs no program.
        assert_eq!(files["annotations"]["readOnlyHint"], false, "{files}");
        assert_eq!(files["annotations"]["destructiveHint"], false, "{files}");

        let remover = tool(&seen, "remover");
        assert_eq!(remover["annotations"]["readOnlyHint"], false, "{remover}");
        assert_eq!(remover["annotations"]["destructiveHint"], true, "{remover}");
        // A manifest without input-schema still gives MCP an object schema.
        assert_eq!(remover["inputSchema"]["type"], "object", "{remover}");
    });
}

#[test]
fn each_example_skill_answers_with_structured_content_and_text() {
    let test = "mcp_python::each_example_skill_answers";
    let Some(python) = client(test) else { return };
    let project = project();
    std::fs::write(project.path().join("notes.txt"), "one two\nthree\n").expect("notes");
    std::fs::create_dir_all(project.path().join("docs")).expect("docs");
    std::fs::write(project.path().join("docs/a.txt"), "alpha").expect("docs/a.txt");
    support::write_skill(
        project.path(),
        "greet",
        "",
        ("main.py", &python_skill("return 'hello'")),
    );
    let examples = examples();
    let spec = json!({"calls": [
        {"tool": "wordcount", "arguments": {"path": "notes.txt"}},
        {"tool": "shout", "arguments": {"path": "notes.txt"}},
        {"tool": "files", "arguments": {"op": "list", "path": "docs"}},
        {"tool": "files", "arguments": {"op": "read", "path": "docs/a.txt"}},
        {"tool": "greet", "arguments": {}},
    ]});
    each_era(|era| {
        let seen = serve(
            &python,
            era,
            "calls",
            spec.clone(),
            project.path(),
            &["--skills-dir", &examples],
        );
        let counted = assert_success(&seen, 0);
        assert_eq!(
            counted,
            &json!({"path": "notes.txt", "lines": 2, "words": 3, "chars": 14})
        );
        // The same JSON as text, for clients that read only text.
        let text: Value = serde_json::from_str(call(&seen, 0)["text"].as_str().unwrap_or(""))
            .unwrap_or_else(|e| panic!("text is not the JSON ({e}):\n{}", seen.context()));
        assert_eq!(&text, counted);

        assert_eq!(assert_success(&seen, 1)["text"], "ONE TWO\nTHREE");
        let listed = assert_success(&seen, 2);
        assert_eq!(listed["entries"][0]["name"], "a.txt", "{listed}");
        assert_eq!(assert_success(&seen, 3)["content"], "alpha");
        // A result that is not an object is wrapped, as MCP wants an object.
        assert_eq!(assert_success(&seen, 4), &json!({"result": "hello"}));
        assert!(call(&seen, 4)["text"]
            .as_str()
            .is_some_and(|t| t.contains("hello")));
    });
}

#[test]
fn a_declared_output_schema_is_listed_and_results_conform_to_it() {
    let test = "mcp_python::a_declared_output_schema";
    let Some(python) = client(test) else { return };
    let project = project();
    let output_schema = json!({
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"]
    });
    support::write_skill(
        project.path(),
        "shaped",
        &format!("output-schema: {output_schema}\n"),
        (
            "main.py",
            &python_skill("return {'n': 41 + p.get('add', 0)}"),
        ),
    );
    let spec = json!({"calls": [{"tool": "shaped", "arguments": {"add": 1}}]});
    each_era(|era| {
        let seen = serve(&python, era, "list", json!({}), project.path(), &[]);
        assert_eq!(tool(&seen, "shaped")["outputSchema"], output_schema);
        // The SDK checks the structured content against the listed schema.
        let seen = serve(&python, era, "calls", spec.clone(), project.path(), &[]);
        assert_eq!(assert_success(&seen, 0), &json!({"n": 42}));
    });
}

#[test]
fn invalid_params_a_denied_write_and_a_timeout_are_tool_errors_naming_the_cause() {
    let test = "mcp_python::failures_are_tool_errors";
    let Some(python) = client(test) else { return };
    let project = project();
    std::fs::write(project.path().join("notes.txt"), "one two\n").expect("notes");
    // Writes through the broker without having declared fs.write.
    support::write_skill(
        project.path(),
        "sneaky",
        "permissions: [fs.read]\n",
        (
            "main.py",
            &python_skill("return client.fs.write('sneaky.txt', 'x')"),
        ),
    );
    support::write_skill(
        project.path(),
        "sleepy",
        "timeout: 1s\n",
        ("main.py", &python_skill("time.sleep(30); return 'woke'")),
    );
    let examples = examples();
    let spec = json!({"calls": [
        {"tool": "wordcount", "arguments": {"path": 7}},
        {"tool": "wordcount", "arguments": {}},
        {"tool": "sneaky", "arguments": {}},
        {"tool": "sleepy", "arguments": {}},
        {"tool": "wordcount", "arguments": {"path": "notes.txt"}},
    ]});
    each_era(|era| {
        // fs.write granted to every skill: what refuses it is the skill's
        // own declaration.
        let seen = serve(
            &python,
            era,
            "calls",
            spec.clone(),
            project.path(),
            &["--skills-dir", &examples, "--grant", "fs.write"],
        );
        assert_tool_error(&seen, 0, &["/path"]);
        assert_tool_error(&seen, 1, &["path"]);
        assert_tool_error(&seen, 2, &["fs.write", "declared permissions"]);
        // Said the way serve says it: the limit, and where it is set.
        assert_tool_error(&seen, 3, &["did not answer within 1s", "timeout"]);
        // None of that broke the session.
        assert_eq!(assert_success(&seen, 4)["words"], 2);
    });
    assert!(!project.path().join("sneaky.txt").exists());
}

/// A persistent skill that writes TAG-started.txt, sleeps, then writes
/// TAG-finished.txt (through the broker, with fs.write granted).
const NAP: &str = "p.get('sleep') and client.fs.write(p['tag'] + '-started.txt', 'x')\n    \
                   time.sleep(p['sleep'])\n    \
                   p.get('sleep') and client.fs.write(p['tag'] + '-finished.txt', 'x')\n    \
                   return {'slept': p['sleep']}";

#[test]
fn a_cancelled_call_frees_the_skill_host() {
    let test = "mcp_python::a_cancelled_call_frees_the_skill_host";
    let Some(python) = client(test) else { return };
    each_era(|era| {
        let project = project();
        support::write_skill(
            project.path(),
            "nap",
            "activation: persistent\npermissions: [fs.write]\ntimeout: 60s\n",
            ("main.py", &python_skill(NAP)),
        );
        let started = project.path().join("slow-started.txt");
        let finished = project.path().join("slow-finished.txt");
        // The next call goes to the same skill: had the cancelled call kept
        // its host, the next one would queue behind the slow call's sleep,
        // and the finished marker would exist by the time it is answered.
        // The sleep (4 s on an idle machine) grows with the load, so that
        // the cancellation always lands inside it; the session lingers past
        // its end.
        let nap = support::wait::seconds(std::time::Duration::from_secs(4));
        let spec = json!({
            "slow": {"tool": "nap", "arguments": {"sleep": nap, "tag": "slow"}},
            "started_file": started,
            "next": {"tool": "nap", "arguments": {"sleep": 0, "tag": "next"}},
            "finished_file": finished,
            "linger": nap + 1,
        });
        let seen = serve(
            &python,
            era,
            "cancel",
            spec,
            project.path(),
            &["--grant", "fs.write"],
        );
        let context = seen.context();
        assert_eq!(seen.json["started"], true, "{context}");
        assert_eq!(
            seen.json["slow"]["outcome"], "still running when cancelled",
            "{context}"
        );
        assert_eq!(seen.json["next"]["isError"], false, "{context}");
        assert_eq!(
            seen.json["next"]["structuredContent"],
            json!({"slept": 0}),
            "{context}"
        );
        assert_eq!(seen.json["finished_file_written"], false, "{context}");
        assert!(!finished.exists(), "{context}");
    });
}

#[test]
fn a_skill_added_while_serving_reaches_the_client() {
    let test = "mcp_python::a_skill_added_while_serving";
    let Some(python) = client(test) else { return };
    each_era(|era| {
        let project = project();
        support::write_skill(
            project.path(),
            "first",
            "",
            ("main.py", &python_skill("return 1")),
        );
        // Made aside and renamed in, so the watcher never sees half a skill.
        let staged = project.path().join("staging/second");
        support::write_skill_at(
            &staged,
            "second",
            "",
            ("main.py", &python_skill("return 2")),
        );
        let spec = json!({
            "add_from": staged,
            "add_to": project.path().join(".skills/second"),
            "expect": "second",
        });
        let seen = serve(&python, era, "reload", spec, project.path(), &[]);
        let context = seen.context();
        assert!(
            !seen.json["before"]
                .as_array()
                .is_some_and(|names| names.contains(&json!("second"))),
            "{context}"
        );
        assert!(
            seen.json["after"]
                .as_array()
                .is_some_and(|names| names.contains(&json!("second"))),
            "{context}"
        );
        match era {
            // The handshake era pushes the change.
            Era::Handshake => assert_eq!(seen.json["notified"], true, "{context}"),
            // The stateless era has no unsolicited notifications: either a
            // subscription announced it, or the listing's cache lifetime
            // ran out (the driver re-lists through the SDK's cache).
            Era::Stateless => {
                if seen.json["mechanism"] == "subscriptions/listen" {
                    assert_eq!(seen.json["notified"], true, "{context}");
                } else {
                    assert!(seen.json["ttlMs"].is_u64(), "{context}");
                }
            }
        }
    });
}

/// A skill that writes granted.txt through the broker; strict asks for
/// every fs.write.
fn asking_project() -> tempfile::TempDir {
    let project = project();
    support::write_skill(
        project.path(),
        "asker",
        "permissions: [fs.write]\n",
        (
            "main.py",
            &python_skill("client.fs.write('granted.txt', 'yes'); return {'written': True}"),
        ),
    );
    project
}

fn ask(python: &Path, era: Era, elicit: Option<&str>) -> (Observed, tempfile::TempDir) {
    let project = asking_project();
    let mut spec = json!({"calls": [{"tool": "asker", "arguments": {}}]});
    if let Some(answer) = elicit {
        spec["elicit"] = json!(answer);
    }
    let seen = serve(python, era, "calls", spec, project.path(), &[]);
    (seen, project)
}

#[test]
fn a_write_that_asks_follows_the_answer_to_the_elicitation() {
    let test = "mcp_python::a_write_that_asks_follows_the_answer";
    let Some(python) = client(test) else { return };
    each_era(|era| {
        let (seen, project) = ask(&python, era, Some("once"));
        let context = seen.context();
        let elicitations = seen.json["elicitations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(elicitations.len(), 1, "{context}");
        let question = &elicitations[0];
        assert!(
            question["message"]
                .as_str()
                .is_some_and(|m| m.contains("fs.write") && m.contains("granted.txt")),
            "{context}"
        );
        assert_eq!(
            question["requestedSchema"]["properties"]["decision"]["enum"],
            json!(["once", "run", "always", "deny"]),
            "{context}"
        );
        assert_eq!(assert_success(&seen, 0), &json!({"written": true}));
        assert_eq!(
            std::fs::read_to_string(project.path().join("granted.txt")).ok(),
            Some("yes".to_string()),
            "{context}"
        );

        // `run`, and `session`, its spelling before (deprecated), allow.
        for word in ["run", "session"] {
            let (seen, project) = ask(&python, era, Some(word));
            assert_eq!(
                assert_success(&seen, 0),
                &json!({"written": true}),
                "{word}"
            );
            assert!(project.path().join("granted.txt").exists(), "{word}");
        }

        let (seen, project) = ask(&python, era, Some("decline"));
        assert_eq!(
            seen.json["elicitations"].as_array().map(Vec::len),
            Some(1),
            "{}",
            seen.context()
        );
        assert_tool_error(&seen, 0, &["fs.write"]);
        assert!(!project.path().join("granted.txt").exists());
    });
}

#[test]
fn a_client_without_elicitation_gets_a_denial_naming_the_grant() {
    let test = "mcp_python::a_client_without_elicitation";
    let Some(python) = client(test) else { return };
    each_era(|era| {
        let (seen, project) = ask(&python, era, None);
        assert_eq!(seen.json["elicitations"], json!([]), "{}", seen.context());
        assert_tool_error(&seen, 0, &["--grant fs.write"]);
        assert!(!project.path().join("granted.txt").exists());
    });
}

#[test]
fn a_long_call_reports_progress() {
    let test = "mcp_python::a_long_call_reports_progress";
    let Some(python) = client(test) else { return };
    let project = project();
    support::write_skill(
        project.path(),
        "long",
        "timeout: 30s\n",
        (
            "main.py",
            // Long enough for a progress notification (every 500 ms) even
            // when the machine is loaded.
            &python_skill(&format!(
                "time.sleep({}); return {{'done': True}}",
                support::wait::seconds(std::time::Duration::from_secs(2))
            )),
        ),
    );
    each_era(|era| {
        let spec = json!({"calls": [{"tool": "long", "arguments": {}, "progress": true}]});
        let seen = serve(&python, era, "calls", spec, project.path(), &[]);
        assert_eq!(assert_success(&seen, 0), &json!({"done": true}));
        let progress = call(&seen, 0)["progress"].as_array().map(Vec::len);
        assert!(progress >= Some(1), "{}", seen.context());
    });
}

/// A shell command in review mode, then `apply_changes` of the project's
/// newest run, answered through the SDK's elicitation callback in each era
/// (a request to the client in 2025-11-25, an `input_required` result the
/// client answers by calling again in 2026-07-28): only `apply` writes.
#[test]
fn a_review_runs_change_reaches_the_project_only_when_the_person_applies_it() {
    let test = "mcp_python::a_review_runs_change_reaches_the_project_only_when_applied";
    let Some(python) = client(test) else { return };
    each_era(|era| {
        for (answer, applied) in [("apply", true), ("keep", false), ("decline", false)] {
            let project = project();
            let spec = json!({
                "calls": [
                    {"tool": "shell", "arguments": {"command": "echo made > made.txt", "review": true}},
                    {"tool": "apply_changes", "arguments": {"run": "last"}},
                ],
                "elicit": answer,
            });
            let seen = serve(&python, era, "calls", spec, project.path(), &["--shell"]);
            let context = seen.context();
            let review = &assert_success(&seen, 0)["review"];
            if review.is_null()
                && call(&seen, 0)["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("mounting the review layer"))
            {
                support::require(test, "overlayfs over tmpfs in a user namespace", false);
                return;
            }
            assert_eq!(review["kept"], true, "{context}");
            let elicitations = seen.json["elicitations"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert_eq!(elicitations.len(), 1, "{answer}: {context}");
            assert!(
                elicitations[0]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("made.txt")),
                "{context}"
            );
            assert_eq!(
                project.path().join("made.txt").exists(),
                applied,
                "{answer}: {context}"
            );
            if applied {
                assert_eq!(
                    assert_success(&seen, 1)["applied"],
                    json!(["made.txt"]),
                    "{context}"
                );
            } else {
                assert_tool_error(&seen, 1, &["did not accept"]);
            }
        }
    });
}
