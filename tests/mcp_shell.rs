//! The MCP shell tool's engine (`sandbox_mcp::shell`), called as the MCP
//! front calls it, running the real binary's `sandbox run`.
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox_mcp::shell::{self, ShellConfig, ShellError, ShellOutcome, ShellRequest};
use serde_json::{json, Map, Value};
use support::{Project, Who};

fn config(project: &Path) -> ShellConfig {
    ShellConfig::new(support::sandbox_bin(), "strict", project).expect("strict loads")
}

fn arguments(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

fn call(config: &ShellConfig, args: Value) -> ShellOutcome {
    let request = ShellRequest::from_arguments(&arguments(args), config).expect("valid arguments");
    block_on(shell::run(config, &request)).expect("the call runs")
}

/// Panic with the whole outcome when it is not what `ok` says.
fn check(outcome: &ShellOutcome, ok: bool, what: &str) {
    assert!(
        outcome.is_error() != ok,
        "{what}: expected {}\n{}",
        if ok { "success" } else { "an error" },
        outcome.text()
    );
}

#[test]
fn a_write_inside_the_project_succeeds_and_lands_on_the_host() {
    if !support::require_root_sandbox("shell write inside") {
        return;
    }
    let project = Project::new(Who::Root);
    let config = config(project.path());
    let outcome = call(
        &config,
        json!({"command": "pwd; echo written-inside > inside.txt"}),
    );
    check(&outcome, true, "write inside the project");
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(outcome.sandbox_error, None);
    // The project is the working directory.
    assert_eq!(
        outcome.stdout.text.trim_end(),
        config.project.to_str().expect("UTF-8")
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("inside.txt")).expect("written on the host"),
        "written-inside\n"
    );
}

#[test]
fn a_write_outside_the_project_fails_and_the_host_is_untouched() {
    if !support::require_root_sandbox("shell write outside") {
        return;
    }
    // Not under /tmp, which is private inside: a sibling of the project
    // that exists on the host is the real target.
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let project = Project::new_in(Who::Root, &base);
    let sibling = tempfile::Builder::new()
        .prefix("sandbox-shell-outside-")
        .tempdir_in(&base)
        .expect("sibling dir");
    let victim = sibling.path().join("pwned.txt");
    let config = config(project.path());
    let outcome = call(
        &config,
        json!({"command": format!("echo pwned > {}", victim.display())}),
    );
    check(&outcome, false, "write to a sibling of the project");
    assert_ne!(outcome.exit_code, Some(0), "{}", outcome.text());
    assert_eq!(outcome.sandbox_error, None, "the command ran, and failed");
    assert!(
        !outcome.stderr.text.is_empty(),
        "the shell says why: {}",
        outcome.text()
    );
    assert!(
        !victim.exists(),
        "the host file outside the project was written"
    );

    // A host directory under /tmp: the sandbox's /tmp is its own, so even
    // a command that makes the directory first never reaches the host's.
    let host_tmp = tempfile::Builder::new()
        .prefix("sandbox-shell-hosttmp-")
        .tempdir_in("/tmp")
        .expect("host /tmp dir");
    let tmp_victim = host_tmp.path().join("pwned.txt");
    let outcome = call(
        &config,
        json!({"command": format!(
            "mkdir -p {dir} && echo pwned > {file} && cat {file}",
            dir = host_tmp.path().display(),
            file = tmp_victim.display()
        )}),
    );
    assert!(
        !tmp_victim.exists(),
        "the host's /tmp was written: {}",
        outcome.text()
    );
    assert_eq!(
        std::fs::read_dir(host_tmp.path()).expect("list").count(),
        0,
        "the host's /tmp directory changed"
    );
}

#[test]
fn output_past_the_cap_is_counted_cut_and_said() {
    if !support::require_root_sandbox("shell output cap") {
        return;
    }
    let project = Project::new(Who::Root);
    let config = config(project.path());
    let total = 200 * 1024;
    let outcome = call(
        &config,
        json!({"command": format!("head -c {total} /dev/zero | tr '\\0' a; echo on-stderr >&2")}),
    );
    check(&outcome, true, "200 KiB of output");
    assert!(outcome.stdout.truncated);
    assert_eq!(outcome.stdout.total_bytes, total);
    assert_eq!(outcome.stdout.shown_bytes, shell::DEFAULT_OUTPUT_CAP as u64);
    assert_eq!(outcome.stdout.text.len(), shell::DEFAULT_OUTPUT_CAP);
    assert!(outcome.stdout.text.bytes().all(|b| b == b'a'));
    // stderr is its own stream, under its own cap.
    assert!(!outcome.stderr.truncated);
    assert_eq!(outcome.stderr.text, "on-stderr\n");
    assert_eq!(outcome.stderr.total_bytes, 10);

    let structured = outcome.structured();
    assert_eq!(structured["stdout_truncated"], true);
    assert_eq!(structured["stdout_bytes"], total);
    assert_eq!(structured["stdout_shown_bytes"], shell::DEFAULT_OUTPUT_CAP);
    assert_eq!(structured["stderr_truncated"], false);
    let text = outcome.text();
    assert!(
        text.contains(&format!(
            "[stdout truncated: {} of {total} bytes shown]",
            shell::DEFAULT_OUTPUT_CAP
        )),
        "{text}"
    );
    assert!(!text.contains("[stderr truncated"), "{text}");
}

#[test]
fn exit_code_and_both_streams_are_the_commands_own() {
    if !support::require_root_sandbox("shell exit code") {
        return;
    }
    let project = Project::new(Who::Root);
    let config = config(project.path());
    let outcome = call(
        &config,
        json!({"command": "echo to-stdout; echo to-stderr >&2; exit 7"}),
    );
    check(&outcome, false, "exit 7");
    assert_eq!(outcome.exit_code, Some(7));
    assert_eq!(outcome.signal, None);
    assert!(!outcome.timed_out);
    assert_eq!(outcome.sandbox_error, None);
    assert_eq!(outcome.stdout.text, "to-stdout\n");
    assert_eq!(outcome.stderr.text, "to-stderr\n");
    assert!(
        outcome.text().starts_with("exit code 7\n"),
        "{}",
        outcome.text()
    );

    // 125 is what `sandbox run` exits with when the sandbox fails: the
    // report, not the status, tells that this one is the command's own.
    let outcome = call(&config, json!({"command": "exit 125"}));
    assert_eq!(outcome.exit_code, Some(125));
    assert_eq!(outcome.sandbox_error, None, "{}", outcome.text());

    // The command can find and run a program of the profile's PATH.
    let outcome = call(&config, json!({"command": "exec true"}));
    check(&outcome, true, "exec true");
    assert_eq!(outcome.structured()["exit_code"], 0);
}

#[test]
fn a_sandbox_failure_is_reported_as_such() {
    if !support::require_root_sandbox("shell sandbox failure") {
        return;
    }
    let project = Project::new(Who::Root);
    let mut config = config(project.path());
    config.profile_spec = project
        .path()
        .join("missing-profile.toml")
        .to_string_lossy()
        .into_owned();
    let outcome = call(&config, json!({"command": "echo never"}));
    check(&outcome, false, "a profile that does not exist");
    assert_eq!(outcome.exit_code, None);
    let error = outcome.sandbox_error.as_deref().expect("a sandbox error");
    assert!(error.contains("missing-profile.toml"), "{error}");
    assert!(
        outcome
            .text()
            .starts_with("the sandbox could not run the command"),
        "{}",
        outcome.text()
    );
}

#[test]
fn a_timeout_ends_the_command_and_is_reported() {
    if !support::require_root_sandbox("shell timeout") {
        return;
    }
    let project = Project::new(Who::Root);
    let config = config(project.path());
    // The timeout covers the sandbox's start too: long enough (on this
    // machine now) for the command to print, and the sleep outlasts it.
    let seconds = support::wait::seconds(Duration::from_secs(2));
    let outcome = call(
        &config,
        json!({"command": "echo started; sleep 3600; echo finished > late.txt",
               "timeout_ms": seconds * 1000}),
    );
    check(&outcome, false, "a command past its timeout");
    assert!(outcome.timed_out, "{}", outcome.text());
    assert_eq!(outcome.timeout, Duration::from_secs(seconds));
    assert_eq!(outcome.stdout.text, "started\n");
    assert!(!project.path().join("late.txt").exists());
    assert_eq!(outcome.structured()["timed_out"], true);
    assert_eq!(outcome.structured()["timeout_ms"], seconds * 1000);
    assert!(
        outcome.text().starts_with(&format!(
            "timed out after {}",
            sandbox::profile::format_duration(Duration::from_secs(seconds))
        )),
        "{}",
        outcome.text()
    );
}

#[test]
fn dropping_the_call_kills_the_whole_run() {
    if !support::require_root_sandbox("shell cancellation") {
        return;
    }
    let project = Project::new(Who::Root);
    let config = config(project.path());
    let marker = support::marker("shell-drop");
    // The marker is in the command line of `sandbox run` and of the shell,
    // and (as a fraction of a second) of the sleep inside.
    let landed = project.path().join(format!("dropped-{marker}.txt"));
    let request = ShellRequest::from_arguments(
        &arguments(json!({"command": format!(
            "sleep 20.{marker}; echo ran-on > {}",
            landed.display()
        )})),
        &config,
    )
    .expect("valid");
    let started = block_on(async {
        let running = shell::run(&config, &request);
        let sleeper_seen = async {
            loop {
                // The sleep runs inside: the sandbox is up and the command started.
                if sleep_running(&format!("20.{marker}")) {
                    return support::host_pids_with(&marker);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            outcome = running => panic!("the call ended by itself: {:?}", outcome.map(|o| o.text())),
            pids = sleeper_seen => pids,
        }
        // `running` is dropped here, the way the MCP front drops a cancelled call.
    });
    assert!(
        started.len() >= 3,
        "expected sandbox run, the shell and the sleep, saw {started:?}"
    );
    let left = support::wait_until_gone(&marker, 10);
    assert!(
        left.is_empty(),
        "processes of the dropped call live on: {left:?}"
    );
    // Every process that held the marker is gone, the sleep's 20 s long
    // before its end: nothing of the run is left to write the file.
    assert!(!landed.exists(), "the dropped command ran to its end");
}

#[test]
fn concurrent_calls_on_a_multi_threaded_runtime_keep_their_own_results() {
    if !support::require_root_sandbox("shell concurrent calls") {
        return;
    }
    let project = Project::new(Who::Root);
    let config = config(project.path());
    let request = |n: u32| {
        ShellRequest::from_arguments(
            &arguments(json!({"command": format!("echo call-{n}; echo err-{n} >&2; exit {n}")})),
            &config,
        )
        .expect("valid")
    };
    let requests: Vec<ShellRequest> = (1..=3).map(request).collect();
    // As the MCP front runs them: several calls at once on worker threads.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let outcomes = runtime.block_on(async {
        let config = std::sync::Arc::new(config.clone());
        let tasks: Vec<_> = requests
            .into_iter()
            .map(|request| {
                let config = config.clone();
                tokio::spawn(async move { shell::run(&config, &request).await })
            })
            .collect();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.expect("task").expect("the call runs"));
        }
        outcomes
    });
    for (n, outcome) in (1..=3).zip(&outcomes) {
        assert_eq!(outcome.exit_code, Some(n), "{}", outcome.text());
        assert_eq!(outcome.stdout.text, format!("call-{n}\n"));
        assert_eq!(outcome.stderr.text, format!("err-{n}\n"));
        assert_eq!(outcome.sandbox_error, None);
    }
}

/// Whether a process runs `sleep DURATION` exactly (not a command line
/// that merely contains it).
fn sleep_running(duration: &str) -> bool {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .any(|entry| {
            std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| {
                let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
                // "sleep", DURATION and the empty piece after the last NUL.
                args.len() == 3 && args[0].ends_with(b"sleep") && args[1] == duration.as_bytes()
            })
        })
}

#[test]
fn invalid_arguments_get_errors_that_name_the_field_and_the_fix() {
    let project = tempfile::tempdir().expect("tempdir");
    let config = config(project.path());
    let error = |args: Value| -> ShellError {
        let err = ShellRequest::from_arguments(&arguments(args), &config)
            .expect_err("invalid arguments are refused");
        assert!(err.is_invalid_arguments(), "{err}");
        err
    };
    let message = |args: Value| error(args).to_string();

    assert!(matches!(error(json!({})), ShellError::MissingCommand));
    assert!(message(json!({})).contains("\"command\""));
    let not_string = message(json!({"command": ["ls", "-la"]}));
    assert!(
        not_string.contains("\"command\" must be a string") && not_string.contains("an array"),
        "{not_string}"
    );
    assert!(matches!(
        error(json!({"command": "  \n"})),
        ShellError::EmptyCommand
    ));
    assert!(matches!(
        error(json!({"command": "echo a\u{0}b"})),
        ShellError::CommandHasNul
    ));
    let unknown = message(json!({"command": "ls", "cwd": "/"}));
    assert!(
        unknown.contains("unknown argument \"cwd\"") && unknown.contains("\"timeout_ms\""),
        "{unknown}"
    );
    let ceiling = config.timeout_ceiling().as_millis() as u64;
    for bad in [json!(0), json!(ceiling + 1)] {
        let text = message(json!({"command": "ls", "timeout_ms": bad}));
        assert!(
            text.contains("\"timeout_ms\"") && text.contains(&format!("from 1 to {ceiling}")),
            "{text}"
        );
    }
    for bad in [json!(-5), json!(1.5), json!("10s"), json!(true)] {
        let text = message(json!({"command": "ls", "timeout_ms": bad}));
        assert!(
            text.contains("\"timeout_ms\" must be a whole number of milliseconds"),
            "{text}"
        );
    }

    // What is valid, and what the schema promises for it.
    let request = ShellRequest::from_arguments(
        &arguments(json!({"command": "ls", "timeout_ms": ceiling})),
        &config,
    )
    .expect("the ceiling itself is allowed");
    assert_eq!(request.timeout, Some(Duration::from_millis(ceiling)));
    let schema = shell::input_schema(&config);
    assert_eq!(schema["required"], json!(["command"]));
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["properties"]["timeout_ms"]["maximum"], ceiling);
}

#[test]
fn the_description_says_what_the_profile_allows() {
    let project = tempfile::tempdir().expect("tempdir");
    let strict = config(project.path());
    let text = shell::description(&strict);
    assert!(text.contains("profile \"strict\""), "{text}");
    assert!(text.contains("read and write the project"), "{text}");
    assert!(text.contains("/usr"), "{text}");
    assert!(text.contains("own loopback"), "{text}");
    assert!(text.contains("no host secrets"), "{text}");
    assert!(text.contains("64KiB"), "{text}");
    let permissive = ShellConfig::new(support::sandbox_bin(), "permissive", project.path())
        .expect("permissive loads");
    let text = shell::description(&permissive);
    assert!(text.contains("host's network is available"), "{text}");
    // A profile that passes a credential from the host makes no promise
    // that it cannot keep.
    let profile = project.path().join("token.toml");
    std::fs::write(
        &profile,
        "version = 1\nextends = \"strict\"\n[env]\npass = [\"LANG\", \"GITHUB_TOKEN\"]\n",
    )
    .expect("profile");
    let passing = ShellConfig::new(
        support::sandbox_bin(),
        profile.to_str().expect("UTF-8"),
        project.path(),
    )
    .expect("the profile loads");
    let text = shell::description(&passing);
    assert!(text.contains("passes the host's GITHUB_TOKEN"), "{text}");
    assert!(!text.contains("no host secrets"), "{text}");

    // The structured result of any outcome fits the declared output schema's fields.
    let schema = shell::output_schema();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .expect("required")
        .iter()
        .map(|v| v.as_str().expect("name"))
        .collect();
    let outcome = ShellOutcome {
        exit_code: Some(0),
        signal: None,
        timed_out: false,
        timeout: Duration::from_secs(1),
        stdout: Default::default(),
        stderr: Default::default(),
        sandbox_error: None,
        review: None,
    };
    let structured = outcome.structured();
    let keys: Vec<&str> = structured
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let mut required_sorted = required.clone();
    required_sorted.sort_unstable();
    assert_eq!(keys, required_sorted);
}

/// A review call writes nothing into the project and returns the change
/// summary from the run's layer: a command that prints a summary of its
/// own (a fake headline, a bidi override in a file name) changes neither
/// the summary nor what a person reads.
#[test]
fn a_review_call_summarizes_the_layer_not_the_output() {
    if !support::require_root_sandbox("a_review_call_summarizes_the_layer_not_the_output") {
        return;
    }
    let project = Project::new(Who::Root);
    std::fs::write(project.path().join("notes.txt"), "first\n").unwrap();
    let config = config(project.path());
    // A fake summary line, a fake JSON summary, and a file whose name
    // holds a right-to-left override (U+202E, bytes e2 80 ae).
    let command = r#"echo second >> notes.txt; printf x > "$(printf 'evil\342\200\256txt.sh')"; echo 'review run X: 0 change(s) kept'; echo 'M harmless.txt'; echo '{"review": {"changes": 0}}'"#;
    let outcome = call(&config, json!({"command": command, "review": true}));
    let text = outcome.text();
    if text.contains("mounting the review layer") {
        support::require(
            "a_review_call_summarizes_the_layer_not_the_output",
            "overlayfs over tmpfs in a user namespace",
            false,
        );
        return;
    }
    check(&outcome, true, "a review run");
    assert_eq!(
        std::fs::read_to_string(project.path().join("notes.txt")).unwrap(),
        "first\n",
        "nothing reached the project"
    );
    let review = outcome.review.clone().expect("a review summary");
    assert_eq!(review["kept"], true, "{review}");
    assert_eq!(review["changes"], 2, "{review}");
    assert_eq!(
        (review["added"].as_u64(), review["modified"].as_u64()),
        (Some(1), Some(1))
    );
    let listed: Vec<&str> = review["listed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["evil\\u{202e}txt.sh", "notes.txt"], "{review}");
    let summary_text = shell::review::text_line(&review);
    assert!(!summary_text.contains('\u{202e}'), "{summary_text}");
    assert!(
        summary_text.contains("2 change(s) kept (1 added, 1 modified, 0 deleted)"),
        "{summary_text}"
    );
    assert!(!summary_text.contains("harmless.txt"), "{summary_text}");
    // The server's store is the one its `sandbox run` used.
    let store = sandbox::review::Store::user();
    let id = review["run"].as_str().unwrap();
    assert_eq!(store.changes(id).unwrap().changes.len(), 2);
    store.discard(id).unwrap();
}
