//! Recipes (`sandbox recipe run`, docs/src/recipes.md): steps that build
//! on each other, applied as one transaction under review mode's rules, or
//! not at all. Each test runs the real command line as root and as an
//! unprivileged user, and checks the project on the host afterwards.

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use support::{identities, Project, Who, TEST_GID, TEST_UID};

/// Whether a recipe's stacked overlay can be mounted here (review mode's
/// overlay, plus a lower layer from the state directory): probed once with
/// a one-step recipe as root. Any other failure counts as available, so
/// the test fails with it instead of skipping.
fn recipes_work() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        let recipe = Recipe::new(Who::Root);
        let out = recipe.run("p.toml", "[[steps]]\nscript = \"true\"\n", &["--review"]);
        let said = text(&out.stderr);
        let refused = said.contains("mounting the review layer");
        if refused {
            eprintln!("recipe probe: {said}");
        }
        !refused
    })
}

fn recipe_identities(test: &str) -> Vec<Who> {
    if !support::require(
        test,
        "overlayfs over tmpfs with a second lower layer in a user namespace",
        recipes_work(),
    ) {
        return Vec::new();
    }
    identities(test)
}

/// A project and a private state directory (which also holds the recipe
/// files, readable by the runner).
struct Recipe {
    project: Project,
    state: tempfile::TempDir,
    who: Who,
}

impl Recipe {
    fn new(who: Who) -> Recipe {
        let project = Project::new(who);
        let state = tempfile::tempdir().expect("state dir");
        std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let recipe = Recipe {
            project,
            state,
            who,
        };
        recipe.chown(recipe.state.path());
        recipe
    }

    fn chown(&self, path: &Path) {
        if self.who == Who::User && nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(path, Some(TEST_UID), Some(TEST_GID)).unwrap();
        }
    }

    /// A file beside the state, owned by the runner.
    fn file(&self, name: &str, content: &str) -> PathBuf {
        let path = self.state.path().join(name);
        std::fs::write(&path, content).unwrap();
        self.chown(&path);
        path
    }

    /// `sandbox ARGS` in the project, stdin closed.
    fn sandbox(&self, args: &[&str]) -> Output {
        self.project
            .command()
            .env("SANDBOX_STATE_DIR", self.state.path())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("sandbox starts")
    }

    /// `sandbox recipe run FILE [extra]` for `content` written as `name`.
    fn run(&self, name: &str, content: &str, extra: &[&str]) -> Output {
        let file = self.file(name, content);
        support::settle(self.project.path());
        let mut args = vec!["recipe", "run", file.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.sandbox(&args)
    }

    /// The recipe's JSON report: the last line on stderr.
    fn report(out: &Output) -> serde_json::Value {
        support::json_report(&text(&out.stderr), "recipe report")
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every path below `root` with its kind, mode and content.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut all = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else if meta.is_symlink() {
                std::fs::read_link(&path)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                stack.push(path.clone());
                Vec::new()
            };
            all.insert(
                path.strip_prefix(root).unwrap().to_path_buf(),
                (meta.mode(), content),
            );
        }
    }
    all
}

#[test]
fn steps_see_what_the_steps_before_left_and_the_result_is_applied() {
    for who in recipe_identities("steps_see_what_the_steps_before_left_and_the_result_is_applied") {
        let recipe = Recipe::new(who);
        recipe.project.write("base.txt", "base\n");
        recipe.project.write("keep/kept.txt", "kept\n");
        let out = recipe.run(
            "build.toml",
            r#"
title = "build on each other"
[[steps]]
name = "write"
script = "echo one > a.txt && rm base.txt && mkdir -p gen && echo x > gen/x && chmod 755 gen/x"
[[steps]]
name = "read"
command = ["/bin/sh", "-c", "cat a.txt > b.txt && test ! -e base.txt && echo base-gone >> b.txt && ./gen/x 2>/dev/null; test -x gen/x && echo exec >> b.txt"]
[[steps]]
name = "env"
script = "echo \"$GREETING\" >> b.txt"
env = { GREETING = "hello" }
"#,
            &["--json"],
        );
        let report = Recipe::report(&out);
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", text(&out.stderr));
        assert_eq!(report["ok"], true, "{who:?}: {report}");
        assert_eq!(report["outcome"]["result"], "applied", "{who:?}: {report}");
        let p = recipe.project.path();
        assert_eq!(
            std::fs::read_to_string(p.join("b.txt")).unwrap(),
            "one\nbase-gone\nexec\nhello\n",
            "{who:?}"
        );
        assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "one\n");
        assert!(
            !p.join("base.txt").exists(),
            "{who:?}: the deletion was applied"
        );
        assert_eq!(
            std::fs::read_to_string(p.join("keep/kept.txt")).unwrap(),
            "kept\n"
        );
        // Each step's own changes, per step.
        let steps = report["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 3, "{report}");
        assert!(steps[0]["changes"]["written"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "a.txt"));
        assert_eq!(steps[0]["changes"]["removed"][0], "base.txt", "{report}");
        assert_eq!(steps[1]["changes"]["written"][0], "b.txt", "{report}");
        assert_eq!(steps[1]["attempts"][0]["status"], 0, "{report}");
        // Nothing is left of the recipe but what it applied (`.lock`, the
        // recipes' shared lock, is no recipe's).
        let left: Vec<_> = std::fs::read_dir(recipe.state.path().join("recipes"))
            .unwrap()
            .filter(|e| e.as_ref().map_or(true, |e| e.file_name() != ".lock"))
            .collect();
        assert!(left.is_empty(), "{who:?}: {left:?}");
    }
}

/// A profile that lets a step keep a counter outside the project, so that
/// it can fail on its first attempt and succeed on its second.
fn counter_profile(recipe: &Recipe) -> (PathBuf, PathBuf) {
    let counter = recipe.state.path().join("counter");
    std::fs::create_dir(&counter).unwrap();
    recipe.chown(&counter);
    let profile = recipe.file(
        "counter.toml",
        &format!(
            "version = 1\nextends = \"strict\"\n[filesystem]\nwrite = [\"{}\"]\n",
            counter.display()
        ),
    );
    (profile, counter)
}

#[test]
fn a_retried_attempt_never_sees_the_failed_attempts_writes() {
    for who in recipe_identities("a_retried_attempt_never_sees_the_failed_attempts_writes") {
        let recipe = Recipe::new(who);
        recipe.project.write("src.txt", "src\n");
        let (profile, counter) = counter_profile(&recipe);
        let script = format!(
            "if [ -e leftover ]; then echo LEAKED > seen; exit 0; fi; \
             echo first-attempt > leftover; echo changed > src.txt; \
             if [ ! -e {c}/tried ]; then touch {c}/tried; exit 1; fi; \
             rm leftover; echo clean > seen",
            c = counter.display()
        );
        let out = recipe.run(
            "flaky.yaml",
            &format!(
                "profile: {}\nsteps:\n  - name: flaky\n    script: '{}'\n    retry: 1\n    retry-delay: 10ms\n",
                profile.display(),
                script.replace('\'', "''")
            ),
            &["--json"],
        );
        let report = Recipe::report(&out);
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", text(&out.stderr));
        let attempts = report["steps"][0]["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{report}");
        assert_eq!(attempts[0]["status"], 1, "{report}");
        assert_eq!(attempts[1]["status"], 0, "{report}");
        let p = recipe.project.path();
        assert_eq!(
            std::fs::read_to_string(p.join("seen")).unwrap(),
            "clean\n",
            "{who:?}"
        );
        assert!(!p.join("leftover").exists(), "{who:?}");
        assert_eq!(
            std::fs::read_to_string(p.join("src.txt")).unwrap(),
            "changed\n"
        );
    }
}

#[test]
fn a_step_that_fails_after_its_retries_leaves_the_project_untouched() {
    for who in recipe_identities("a_step_that_fails_after_its_retries_leaves_the_project_untouched")
    {
        let recipe = Recipe::new(who);
        recipe
            .project
            .write("src/main.c", "int main(void) { return 0; }\n");
        recipe.project.write("notes.txt", "notes\n");
        let before = snapshot(recipe.project.path());
        let out = recipe.run(
            "fails.toml",
            r#"
[[steps]]
name = "edit"
script = "echo edited > notes.txt && rm src/main.c && mkdir new && echo n > new/file"
[[steps]]
name = "test"
script = "echo half > half-written; exit 4"
retry = 2
retry-delay = "10ms"
retry-backoff = "exponential"
"#,
            &[],
        );
        assert_eq!(out.status.code(), Some(1), "{who:?}: {}", text(&out.stderr));
        let said = text(&out.stderr);
        assert!(said.contains("step `test` failed"), "{who:?}: {said}");
        assert!(said.contains("exit 4"), "{who:?}: {said}");
        assert_eq!(
            snapshot(recipe.project.path()),
            before,
            "{who:?}: the project changed"
        );
        // Nothing kept either: no run for `sandbox changes`.
        let list = recipe.sandbox(&["changes", "--list"]);
        assert_eq!(text(&list.stdout), "", "{who:?}");
    }
}

#[test]
fn what_the_host_would_run_or_trust_is_refused_at_apply_and_named() {
    for who in recipe_identities("what_the_host_would_run_or_trust_is_refused_at_apply_and_named") {
        let recipe = Recipe::new(who);
        recipe.project.write("ok.txt", "ok\n");
        let before = snapshot(recipe.project.path());
        let out = recipe.run(
            "plant.toml",
            r#"
[[steps]]
name = "ci"
script = "mkdir -p .github/workflows && echo 'on: push' > .github/workflows/x.yml"
[[steps]]
name = "hook"
script = "mkdir -p sub/.git/hooks && echo evil > sub/.git/hooks/post-checkout"
[[steps]]
name = "setuid"
script = "echo '#!/bin/sh' > suid && chmod 4755 suid 2>/dev/null; echo fine > fine.txt"
"#,
            &["--json"],
        );
        assert_eq!(out.status.code(), Some(1), "{who:?}: {}", text(&out.stderr));
        let report = Recipe::report(&out);
        assert_eq!(report["outcome"]["result"], "refused", "{who:?}: {report}");
        // Each refusal names the path, why, and the flag that allows it.
        let reasons: Vec<String> = report["outcome"]["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| format!("{} {} {}", r["path"], r["reason"], r["flag"]).replace('"', ""))
            .collect();
        // Where the sandbox let the step set the bit, the layer kept it.
        let run = report["outcome"]["run"].as_str().unwrap();
        let listing = recipe.sandbox(&["changes", run, "--json"]);
        support::assert_ok(&listing, "changes --json");
        let listing: serde_json::Value = serde_json::from_slice(&listing.stdout).unwrap();
        let suid_kept = listing["changes"].as_array().unwrap().iter().any(|c| {
            c["path"] == "suid" && c["after"]["mode"].as_u64().is_some_and(|m| m & 0o4000 != 0)
        });
        let mut expected = vec![
            (".github/workflows/x.yml", "--allow-ci"),
            ("sub/.git/hooks/post-checkout", "--allow-protected"),
        ];
        if suid_kept {
            expected.push(("suid", "--allow-setid"));
        }
        for (path, flag) in expected {
            assert!(
                reasons
                    .iter()
                    .any(|r| r.starts_with(path) && r.contains(flag)),
                "{who:?}: {path} with {flag} in {reasons:?}"
            );
        }
        assert_eq!(
            snapshot(recipe.project.path()),
            before,
            "{who:?}: the project changed"
        );
        // Kept for review under the run id the report names.
        let changes = recipe.sandbox(&["changes", run]);
        support::assert_ok(&changes, "changes");
        assert!(text(&changes.stdout).contains("fine.txt"), "{who:?}");
    }
}

#[test]
fn review_keeps_the_recipes_changes_for_apply() {
    for who in recipe_identities("review_keeps_the_recipes_changes_for_apply") {
        let recipe = Recipe::new(who);
        let out = recipe.run(
            "keep.toml",
            "[[steps]]\nscript = \"echo 1 > one\"\n[[steps]]\nscript = \"cat one one > two\"\n",
            &["--review", "--json"],
        );
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", text(&out.stderr));
        let report = Recipe::report(&out);
        assert_eq!(report["outcome"]["result"], "kept", "{report}");
        assert!(!recipe.project.path().join("two").exists(), "{who:?}");
        let run = report["outcome"]["run"].as_str().unwrap();
        support::assert_ok(&recipe.sandbox(&["apply", run]), "apply");
        assert_eq!(
            std::fs::read_to_string(recipe.project.path().join("two")).unwrap(),
            "1\n1\n"
        );
    }
}

#[test]
fn a_goose_recipe_runs_its_checks_and_retries_the_whole_recipe() {
    for who in recipe_identities("a_goose_recipe_runs_its_checks_and_retries_the_whole_recipe") {
        let recipe = Recipe::new(who);
        let (profile, counter) = counter_profile(&recipe);
        // Goose's shape: the checks fail on the first try (the step wrote
        // "draft"), the whole recipe is rolled back and tried again.
        let goose = format!(
            r#"version: "1.0.0"
title: "Goose-style"
description: "checks and a retry of the whole recipe"
profile: {profile}
retry:
  max_retries: 2
  timeout_seconds: 60
  checks:
    - type: shell
      command: "grep -q final out.txt"
  on_failure: "echo cleaning-up > cleanup.txt"
steps:
  - name: write
    script: |
      cat out.txt 2>/dev/null && exit 9
      if [ -e {c}/second ]; then echo final > out.txt; else touch {c}/second; echo draft > out.txt; fi
"#,
            profile = profile.display(),
            c = counter.display()
        );
        let out = recipe.run("goose.yaml", &goose, &["--json"]);
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", text(&out.stderr));
        let report = Recipe::report(&out);
        assert_eq!(report["tries"], 2, "{report}");
        let p = recipe.project.path();
        assert_eq!(
            std::fs::read_to_string(p.join("out.txt")).unwrap(),
            "final\n"
        );
        assert!(
            !p.join("cleanup.txt").exists(),
            "on_failure's writes are dropped"
        );

        // Checks that never pass: every try rolled back, nothing applied.
        let failing = goose
            .replace("grep -q final", "grep -q never")
            .replace("cat out.txt 2>/dev/null && exit 9", "true");
        let out = recipe.run("never.yaml", &failing, &["--json"]);
        assert_eq!(out.status.code(), Some(1), "{who:?}: {}", text(&out.stderr));
        let report = Recipe::report(&out);
        assert_eq!(report["tries"], 3, "{report}");
        assert_eq!(report["failed_step"], "checks", "{report}");
        assert_eq!(
            std::fs::read_to_string(p.join("out.txt")).unwrap(),
            "final\n"
        );
    }
}

#[test]
fn parse_errors_name_the_file_line_and_field() {
    let state = tempfile::tempdir().unwrap();
    let check = |name: &str, content: &str| {
        let path = state.path().join(name);
        std::fs::write(&path, content).unwrap();
        let out = std::process::Command::new(support::sandbox_bin())
            .args(["recipe", "check", path.to_str().unwrap()])
            .output()
            .unwrap();
        (out.status.code(), text(&out.stderr), path)
    };
    let (code, said, path) = check("bad.toml", "[[steps]]\nscript = \"true\"\nretires = 1\n");
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains(&format!("{}:3:", path.display())), "{said}");
    assert!(said.contains("retires"), "{said}");
    let (code, said, path) = check(
        "bad.yaml",
        "title: t\nsteps:\n  - name: a\n    script: \"true\"\n    timeout: soon\n",
    );
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains(&format!("{}:5", path.display())), "{said}");
    assert!(said.contains("timeout"), "{said}");
    let (code, said, path) = check(
        "agent.yaml",
        "title: t\ninstructions: be helpful\nsteps:\n  - script: \"true\"\n",
    );
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains(&format!("{}:2: `instructions`", path.display())),
        "{said}"
    );
    let (code, said, _) = check("ok.yaml", "steps:\n  - command: [\"true\"]\n");
    assert_eq!(code, Some(0), "{said}");
}

#[test]
fn the_steps_layers_together_are_bounded_by_the_layer_limit() {
    for who in recipe_identities("the_steps_layers_together_are_bounded_by_the_layer_limit") {
        let recipe = Recipe::new(who);
        let profile = recipe.file(
            "small.toml",
            "version = 1\nextends = \"strict\"\n[filesystem]\nreview_size = \"1MiB\"\n",
        );
        // Each step fits the 1 MiB layer; the two together do not.
        let steps = "[[steps]]\nscript = \"head -c 700000 /dev/zero > a\"\n\
                     [[steps]]\nscript = \"head -c 700000 /dev/zero > b\"\n";
        let out = recipe.run(
            "big.toml",
            &format!("profile = \"{}\"\n{steps}", profile.display()),
            &["--json"],
        );
        assert_eq!(out.status.code(), Some(1), "{who:?}: {}", text(&out.stderr));
        let report = Recipe::report(&out);
        assert_eq!(report["steps"][0]["ok"], true, "{report}");
        assert_eq!(report["failed_step"], "step 2", "{report}");
        let error = report["steps"][1]["attempts"][0]["error"]
            .as_str()
            .unwrap_or("");
        assert!(error.contains("layer limit"), "{report}");
        assert!(!recipe.project.path().join("a").exists(), "{who:?}");
    }
}

/// Whether a process whose command line holds `marker` runs.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
}

/// Wait (a minute at most) until `done` holds.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "waited a minute for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The recipe directories in the state directory.
fn recipe_dirs(state: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(state.join("recipes")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// A recipe killed with SIGKILL in the middle of a step leaves its
/// stacked layers behind; the next recipe removes them, and never the
/// directory of a recipe that is running at that moment.
#[test]
fn a_killed_recipes_layers_are_swept_by_the_next_and_a_running_ones_kept() {
    let test = "a_killed_recipes_layers_are_swept_by_the_next_and_a_running_ones_kept";
    for who in recipe_identities(test) {
        let recipe = Recipe::new(who);
        let state = recipe.state.path();
        let start = |name: &str, marker: &str| {
            let file = recipe.file(
                name,
                &format!("[[steps]]\nscript = \"echo kept > kept.txt; sleep 300 # {marker}\"\n"),
            );
            let child = recipe
                .project
                .command()
                .env("SANDBOX_STATE_DIR", state)
                .args(["recipe", "run", file.to_str().unwrap()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            wait_until("the step to run", || running(marker));
            child
        };

        let killed_marker = support::marker("recipe-killed");
        let mut killed = start("killed.toml", &killed_marker);
        let leftover = recipe_dirs(state);
        assert_eq!(leftover.len(), 1, "{who:?}: {leftover:?}");
        let leftover = leftover[0].clone();
        killed.kill().unwrap();
        killed.wait().unwrap();
        wait_until("the killed recipe's step to end", || {
            !running(&killed_marker)
        });
        assert!(
            leftover.join("layer").is_dir(),
            "{who:?}: SIGKILL left nothing to sweep"
        );

        let live_marker = support::marker("recipe-live");
        let mut live = start("live.toml", &live_marker);
        let live_dir: Vec<PathBuf> = recipe_dirs(state)
            .into_iter()
            .filter(|d| *d != leftover)
            .collect();
        assert_eq!(live_dir.len(), 1, "{who:?}: {live_dir:?}");
        let live_dir = live_dir[0].clone();

        let out = recipe.run("next.toml", "[[steps]]\nscript = \"true\"\n", &[]);
        assert!(out.status.success(), "{who:?}: {}", text(&out.stderr));
        assert!(
            !leftover.exists(),
            "{who:?}: the killed recipe's layers stayed"
        );
        assert!(
            live_dir.join("layer").is_dir() && running(&live_marker),
            "{who:?}: the running recipe's directory was touched"
        );
        assert_eq!(
            recipe_dirs(state),
            std::slice::from_ref(&live_dir),
            "{who:?}"
        );

        live.kill().unwrap();
        live.wait().unwrap();
        wait_until("the live recipe's step to end", || !running(&live_marker));
        assert!(!recipe.project.path().join("kept.txt").exists(), "{who:?}");
    }
}
