//! The dry run `doctor` relies on ([`sandbox::spawn::SpawnSpec::dry_run`]):
//! every step is set up and nothing is executed.
//!
//! Cloning is only sound from a single-threaded process and libtest runs
//! tests on threads, so this binary has no harness: `main` runs the test
//! on the main thread.

mod support;

use sandbox::spawn::channel::PayloadExit;
use sandbox::spawn::prepare::StartInputs;
use sandbox::spawn::{parent, Prepared, SpawnSpec};

/// A command that would leave a file in the project leaves none, and the
/// run still ends with status 0 after Landlock was applied.
fn dry_run_sets_up_and_never_executes() {
    let project = tempfile::tempdir().expect("tempdir");
    let policy = sandbox::profile::load("strict").expect("strict loads");
    let spec = SpawnSpec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "echo ran > executed".into()],
        project: project.path().to_path_buf(),
        project_explicit: true,
        cwd: None,
        env: Vec::new(),
        dry_run: true,
        read_only_extra: Vec::new(),
        review_stack: None,
    };
    let mut prepared = Prepared::new(&policy, spec, Default::default()).expect("prepares");
    let inputs = StartInputs {
        stdio: [
            sandbox::Stdio::Null,
            sandbox::Stdio::Null,
            sandbox::Stdio::Null,
        ],
        ..Default::default()
    };
    let outcome = match parent::run(&mut prepared, inputs) {
        Ok(outcome) => outcome,
        Err(err) => {
            support::require(
                "dry_run_sets_up_and_never_executes",
                &format!("a sandbox starting here ({err})"),
                false,
            );
            return;
        }
    };
    assert_eq!(outcome.exit, PayloadExit::Code(0), "{outcome:?}");
    assert!(
        !project.path().join("executed").exists(),
        "the dry run executed the command"
    );
    // The payload reported Landlock before exiting: the setup really ran.
    assert!(outcome.landlock.is_some(), "{outcome:?}");
}

fn main() {
    support::harness::run(
        "dry_run",
        &[(
            "dry_run_sets_up_and_never_executes",
            dry_run_sets_up_and_never_executes,
        )],
    );
}
