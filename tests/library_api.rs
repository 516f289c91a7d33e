//! The library API: `Command` mirrors `std::process::Command`, and nothing
//! of a run outlives its `Child` handle.
//!
//! `harness = false`: the supervisor clones from its own process, which is
//! only sound single-threaded, and libtest runs tests on threads. This binary
//! runs its tests one after another on the main thread.

mod support;

use std::io::Read;
use std::time::Duration;

use sandbox::{Command, Stdio};

/// Whether a sandbox can start here, for `test`: skipped loudly through
/// [`support::require`] when the kernel refuses to create namespaces. A
/// failure other than that is a bug and fails the test.
fn userns_available(test: &str) -> bool {
    let project = tempfile::tempdir().expect("tempdir");
    let refused = match Command::new("/bin/true", strict())
        .project(project.path())
        .stdout(Stdio::Null)
        .status()
    {
        Ok(status) => {
            assert!(
                status.success(),
                "/bin/true failed in the sandbox: {status:?}"
            );
            None
        }
        Err(err @ sandbox::SpawnError::Clone { .. }) => Some(err.to_string()),
        Err(err) => panic!("the sandbox failed to start: {err}"),
    };
    let feature = match &refused {
        Some(err) => format!("namespaces for the library's sandbox ({err})"),
        None => String::new(),
    };
    support::require(test, &feature, refused.is_none())
}

fn strict() -> sandbox::Policy {
    sandbox::profile::load("strict").expect("strict loads")
}

fn process_alive(host_pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{host_pid}")).exists()
}

fn status_carries_the_exit_code_and_output_flows_through_a_pipe() {
    if !userns_available("status_carries_the_exit_code_and_output_flows_through_a_pipe") {
        return;
    }
    let project = tempfile::tempdir().unwrap();
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    let mut command = Command::new("/bin/sh", strict());
    command
        .args(["-c", "echo hello from inside; exit 3"])
        .project(project.path())
        .stdout(Stdio::Fd(write_end));
    let finished = command.run();
    let status = finished.result.expect("run starts");
    assert_eq!(status.code(), Some(3));
    assert!(!status.success());
    let mut out = String::new();
    std::fs::File::from(read_end)
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "hello from inside\n");
    let report = finished.report.expect("a report");
    assert_eq!(report.exit.as_ref().and_then(|e| e.code), Some(3));
}

fn kill_ends_every_process_of_the_run() {
    if !userns_available("kill_ends_every_process_of_the_run") {
        return;
    }
    let project = tempfile::tempdir().unwrap();
    let mut child = Command::new("/bin/sleep", strict())
        .arg("600")
        .project(project.path())
        .spawn()
        .expect("spawn");
    let init = child.id();
    assert!(process_alive(init));
    child.kill().unwrap();
    let finished = child.wait();
    let status = finished.result.expect("collected");
    assert_eq!(status.signal(), Some(9), "init was killed by SIGKILL");
    assert!(!process_alive(init));
}

fn dropping_a_child_without_waiting_kills_the_run() {
    if !userns_available("dropping_a_child_without_waiting_kills_the_run") {
        return;
    }
    let project = tempfile::tempdir().unwrap();
    let child = Command::new("/bin/sleep", strict())
        .arg("600")
        .project(project.path())
        .spawn()
        .expect("spawn");
    let init = child.id();
    drop(child);
    // A limit on the wait, not a speed: the kill is asserted, not how soon.
    assert!(
        support::wait::holds_within(Duration::from_secs(60), || !process_alive(init)),
        "init {init} survived its dropped handle"
    );
}

fn a_missing_program_is_an_exec_error_with_status_127() {
    if !userns_available("a_missing_program_is_an_exec_error_with_status_127") {
        return;
    }
    let project = tempfile::tempdir().unwrap();
    let err = Command::new("no-such-program-here", strict())
        .project(project.path())
        .status()
        .unwrap_err();
    assert_eq!(err.exit_status(), 127);
    assert_eq!(
        err.to_string(),
        "cannot execute 'no-such-program-here': No such file or directory"
    );
}

fn a_working_directory_outside_the_project_is_refused_before_anything_starts() {
    let project = tempfile::tempdir().unwrap();
    let err = Command::new("/bin/true", strict())
        .project(project.path())
        .current_dir("/usr")
        .status()
        .unwrap_err();
    assert!(
        err.to_string().contains("is outside the project root"),
        "{err}"
    );
    assert_eq!(err.exit_status(), 125);
}

/// Runs last: it leaves a thread behind on purpose.
fn a_multi_threaded_caller_is_refused_instead_of_cloning_unsafely() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let helper = std::thread::spawn(move || {
        let _ = rx.recv();
    });
    let project = tempfile::tempdir().unwrap();
    let err = Command::new("/bin/true", strict())
        .project(project.path())
        .status()
        .unwrap_err();
    assert!(
        matches!(err, sandbox::SpawnError::NotSingleThreaded { threads: 2 }),
        "{err}"
    );
    assert!(err.to_string().contains("single-threaded"), "{err}");
    drop(tx);
    helper.join().unwrap();
}

fn main() {
    let tests: [(&str, fn()); 6] = [
        (
            "status_carries_the_exit_code_and_output_flows_through_a_pipe",
            status_carries_the_exit_code_and_output_flows_through_a_pipe,
        ),
        (
            "kill_ends_every_process_of_the_run",
            kill_ends_every_process_of_the_run,
        ),
        (
            "dropping_a_child_without_waiting_kills_the_run",
            dropping_a_child_without_waiting_kills_the_run,
        ),
        (
            "a_missing_program_is_an_exec_error_with_status_127",
            a_missing_program_is_an_exec_error_with_status_127,
        ),
        (
            "a_working_directory_outside_the_project_is_refused_before_anything_starts",
            a_working_directory_outside_the_project_is_refused_before_anything_starts,
        ),
        (
            "a_multi_threaded_caller_is_refused_instead_of_cloning_unsafely",
            a_multi_threaded_caller_is_refused_instead_of_cloning_unsafely,
        ),
    ];
    support::harness::run("library_api", &tests);
}
