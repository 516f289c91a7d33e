//! Attacks on the daemon's warm sandboxes: what happens to the project
//! between the sandbox's walk and its commit must not let the payload do
//! what a cold run of the same command would refuse.

mod support;

use support::daemon::{pooled_daemon, run_to_end, wait_for_warm_sandbox};

/// A project file that gains a hard link outside the project after the
/// warm sandbox's walk (a local `git clone`, a `cp -al` backup) is one a
/// cold run mounts read-only: the warm run must not let the payload write
/// the outside file through it. The new link is made outside the project,
/// so no watch on the project's directories sees it; only the file's own
/// link count changes.
#[test]
fn a_hard_link_made_outside_after_the_walk_does_not_let_a_warm_run_write_through_it() {
    if !support::require_root_sandbox(
        "a_hard_link_made_outside_after_the_walk_does_not_let_a_warm_run_write_through_it",
    ) {
        return;
    }
    let daemon = pooled_daemon();
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let outside = tempfile::tempdir_in("/tmp").expect("outside");
    std::fs::create_dir(project.path().join("sub")).expect("sub");
    let inside = project.path().join("sub/shared.txt");
    std::fs::write(&inside, "original\n").expect("file");
    let (first, _, _) = run_to_end(&daemon, project.path(), &["true"]);
    assert_eq!(first["status"], 0, "{first}");
    wait_for_warm_sandbox(&daemon);
    let victim = outside.path().join("shared.txt");
    std::fs::hard_link(&inside, &victim).expect("link outside");
    let (second, out, err) = run_to_end(
        &daemon,
        project.path(),
        &["sh", "-c", "echo tampered > sub/shared.txt; echo wrote=$?"],
    );
    assert_eq!(
        std::fs::read_to_string(&victim).expect("outside file"),
        "original\n",
        "the payload wrote a file outside the project through a hard link: {second}\n{out}{err}\n{}",
        daemon.log()
    );
}
