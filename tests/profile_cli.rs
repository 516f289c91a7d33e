//! `sandbox profile list|show|check`, run as the real binary.
use std::path::Path;
use std::process::{Command, Output};

fn sandbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(args)
        .output()
        .expect("run the sandbox binary")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Write `text` to `name` in `dir`, run `sandbox profile check` on it, and
/// return (exit status, stderr, the file's path).
fn check(dir: &Path, name: &str, text: &str) -> (Option<i32>, String, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write profile");
    let path = path.display().to_string();
    let out = sandbox(&["profile", "check", &path]);
    (out.status.code(), stderr(&out), path)
}

#[test]
fn list_names_every_builtin() {
    let out = sandbox(&["profile", "list"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["strict", "standard", "permissive"]);
    assert!(
        text.lines().all(|l| l.split_whitespace().count() > 2),
        "{text}"
    );
}

#[test]
fn list_json() {
    let out = sandbox(&["profile", "list", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let entries = value.as_array().expect("array");
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0]["name"], "strict");
    assert!(entries[0]["description"]
        .as_str()
        .is_some_and(|d| !d.is_empty()));
}

#[test]
fn show_prints_a_profile_that_checks() {
    let out = sandbox(&["profile", "show", "permissive"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("mode = \"host\""), "{text}");
    assert!(text.contains("cpu = \"unlimited\""), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("extends")), "{text}");

    let dir = tempfile::tempdir().expect("tempdir");
    let (code, err, path) = check(dir.path(), "shown.toml", &text);
    assert_eq!(code, Some(0), "{err}");
    let again = sandbox(&["profile", "show", &path]);
    assert_eq!(
        stdout(&again).lines().skip(1).collect::<Vec<_>>(),
        text.lines().skip(1).collect::<Vec<_>>()
    );
}

#[test]
fn show_json() {
    let out = sandbox(&["profile", "show", "strict", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["name"], "strict");
    assert_eq!(value["network"]["mode"], "loopback");
    assert_eq!(value["enforce"]["cgroups"], "best-effort");
    assert_eq!(value["limits"]["timeout"], 600.0);
}

#[test]
fn check_ok() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mine.toml");
    std::fs::write(
        &path,
        "version = 1\nextends = \"standard\"\n[network]\nmode = \"none\"\n",
    )
    .expect("write");
    let path = path.display().to_string();
    let out = sandbox(&["profile", "check", &path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("{path}: ok (profile mine)\n"));
}

#[test]
fn check_unknown_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, err, path) = check(
        dir.path(),
        "p.toml",
        "version = 1\n[network]\nmode = \"none\"\nports = [443]\n",
    );
    assert_eq!(code, Some(2));
    assert_eq!(
        err,
        format!("{path}:4:1: unknown field `ports`, expected one of `mode`, `allow`, `allow_add`, `allow_remove`, `resolve`\n")
    );
}

#[test]
fn check_bad_enum_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, err, path) = check(
        dir.path(),
        "p.toml",
        "version = 1\n[enforce]\nseccomp = \"sometimes\"\n",
    );
    assert_eq!(code, Some(2));
    assert_eq!(
        err,
        format!("{path}:3:11: unknown variant `sometimes`, expected one of `required`, `best-effort`, `off`\n")
    );
}

#[test]
fn check_relative_read_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, err, path) = check(
        dir.path(),
        "p.toml",
        "version = 1\n[filesystem]\nread = [\"/usr\", \"etc/ssl\"]\n",
    );
    assert_eq!(code, Some(2));
    assert_eq!(
        err,
        format!("{path}:3:17: `filesystem.read` paths must be absolute: \"etc/ssl\" does not start with '/'\n")
    );
}

#[test]
fn check_extends_cycle() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("b.toml"),
        "version = 1\nextends = \"a.toml\"\n",
    )
    .expect("write");
    let (code, err, a) = check(dir.path(), "a.toml", "version = 1\nextends = \"b.toml\"\n");
    let b = dir.path().join("b.toml").display().to_string();
    assert_eq!(code, Some(2));
    assert_eq!(
        err,
        format!("{b}:2:11: `extends` cycle: {a} -> {b} -> {a}\n")
    );
}

#[test]
fn check_version_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, err, path) = check(
        dir.path(),
        "p.toml",
        "version = 2\n[network]\nmode = \"satellite\"\n",
    );
    assert_eq!(code, Some(2));
    assert_eq!(
        err,
        format!("{path}:1:11: unsupported profile version 2: this sandbox reads version 1 only\n")
    );
}

#[test]
fn check_missing_file_names_the_reason() {
    let out = sandbox(&["profile", "check", "/nonexistent/p.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "/nonexistent/p.toml: cannot read the profile: No such file or directory (os error 2)\n"
    );
}

#[test]
fn show_unknown_builtin() {
    let out = sandbox(&["profile", "show", "strickt"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with(
            "unknown profile `strickt`: the built-in profiles are strict, standard, permissive"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_rule_key_with_an_unknown_action_names_the_valid_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("badkey.toml");
    std::fs::write(&path, "version = 1\nextends = \"strict\"\n[broker]\nrules = { \"fs.writ:dist/**\" = \"allow\" }\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["profile", "check"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("badkey.toml:4:11: \"fs.writ\" is not a broker action (fs.read, fs.write"),
        "{stderr}"
    );
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "version = 1\nextends = \"strict\"\n[broker]\nrules = { \"fs.write:dist/**\" = \"allow\" }\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["profile", "check"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `extends = "strict"` with `read_if_exists = [...]` replaces strict's list
/// and with it the dynamic loader's directory: valid, but no run can start a
/// program. `check` says so and names the `_add` form, which keeps strict's
/// list and adds the entry.
#[test]
fn a_replaced_list_that_drops_the_loader_warns_and_the_add_form_does_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, err, path) = check(
        dir.path(),
        "replaces.toml",
        "version = 1\nextends = \"strict\"\n[filesystem]\nread_if_exists = [\"/etc/resolv.conf\"]\n",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.starts_with(&format!(
            "warning: {path}: `filesystem.read_if_exists` replaces the list it inherits"
        )),
        "{err}"
    );
    assert!(
        err.contains("read_if_exists_add = [\"/etc/resolv.conf\"]"),
        "{err}"
    );
    assert!(err.contains("dynamic loader"), "{err}");

    let (code, err, path) = check(
        dir.path(),
        "adds.toml",
        "version = 1\nextends = \"strict\"\n[filesystem]\nread_if_exists_add = [\"/etc/resolv.conf\"]\n",
    );
    assert_eq!((code, err.as_str()), (Some(0), ""));
    let shown = sandbox(&["profile", "show", &path, "--json"]);
    let policy: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("JSON");
    let list: Vec<&str> = policy["filesystem"]["read_if_exists"]
        .as_array()
        .expect("read_if_exists")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(
        list.contains(&"/lib64") && list.contains(&"/lib"),
        "{list:?}"
    );
    assert_eq!(list.last(), Some(&"/etc/resolv.conf"), "{list:?}");
}
