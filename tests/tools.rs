//! Toolchains outside /usr: a host path exposed read-only behind a private
//! parent, `--tool` and `[tools]`, and the message for a command that is on
//! the host but not inside. As root and as an unprivileged user.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{assert_ok, identities, Project, Who, TEST_GID, TEST_UID};

/// A fake toolchain `<home>/.pyenvtest/bin/tool` below a 0700 home owned by
/// `who`, as /root is and as a CI runner's home often is.
struct PrivateToolchain {
    _dir: tempfile::TempDir,
    home: PathBuf,
}

impl PrivateToolchain {
    fn new(who: Who) -> PrivateToolchain {
        let dir = tempfile::Builder::new()
            .prefix("sandbox-tools-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let home = dir.path().join("home");
        let bin = home.join(".pyenvtest/bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        std::fs::write(bin.join("tool"), "#!/bin/sh\necho tool ran\n").expect("tool");
        std::fs::set_permissions(bin.join("tool"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        if who == Who::User && nix::unistd::geteuid().is_root() {
            let status = Command::new("chown")
                .arg("-R")
                .arg(format!("{TEST_UID}:{TEST_GID}"))
                .arg(&home)
                .status()
                .expect("chown");
            assert!(status.success());
        }
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        PrivateToolchain { _dir: dir, home }
    }

    fn root(&self) -> PathBuf {
        self.home.join(".pyenvtest")
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_toolchain_behind_a_private_parent_is_exposed_read_only() {
    for who in identities("a_toolchain_behind_a_private_parent_is_exposed_read_only") {
        let project = Project::new(who);
        let toolchain = PrivateToolchain::new(who);
        let root = toolchain.root();
        let tool = root.join("bin/tool");
        let out = project.run_with(
            &["--allow-read", root.to_str().expect("UTF-8")],
            &[tool.to_str().expect("UTF-8")],
        );
        assert_ok(&out, &format!("the tool as {who:?}"));
        assert_eq!(text(&out.stdout), "tool ran\n", "{who:?}");
        // Read-only stays read-only: the payload can neither change the tool
        // nor add a file next to it.
        let attack = format!(
            "echo 'echo owned' > {tool} 2>/dev/null; echo x > {bin}/planted 2>/dev/null; \
             chmod 777 {tool} 2>/dev/null; true",
            tool = tool.display(),
            bin = root.join("bin").display()
        );
        let out = project.run_with(
            &["--allow-read", root.to_str().expect("UTF-8")],
            &["/bin/sh", "-c", &attack],
        );
        assert_ok(&out, &format!("the attack as {who:?}"));
        assert_eq!(
            std::fs::read_to_string(&tool).expect("tool"),
            "#!/bin/sh\necho tool ran\n",
            "{who:?}"
        );
        assert!(!root.join("bin/planted").exists(), "{who:?}");
        let mode = std::fs::metadata(&tool).expect("tool").permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{who:?}");
        // The rest of the private home stays out of view.
        std::fs::write(toolchain.home.join("secret"), "s").expect("secret");
        let out = project.run_with(
            &["--allow-read", root.to_str().expect("UTF-8")],
            &[
                "/bin/sh",
                "-c",
                &format!("cat {}/secret", toolchain.home.display()),
            ],
        );
        assert!(!out.status.success(), "{who:?} read the home");
    }
}

/// A home with a fake Rust toolchain: `cargo` in ~/.cargo/bin and a
/// registry token in ~/.cargo/credentials.toml.
fn fake_rust_home(who: Who) -> tempfile::TempDir {
    let home = tempfile::Builder::new()
        .prefix("sandbox-tools-home-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let bin = home.path().join(".cargo/bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::fs::create_dir_all(home.path().join(".rustup")).expect("mkdir");
    std::fs::write(
        bin.join("cargo"),
        "#!/bin/sh\necho \"fake cargo CARGO_HOME=$CARGO_HOME\"\n",
    )
    .expect("cargo");
    std::fs::set_permissions(bin.join("cargo"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    std::fs::write(
        home.path().join(".cargo/credentials.toml"),
        "[registry]\ntoken = \"cio-secret\"\n",
    )
    .expect("credentials");
    if who == Who::User && nix::unistd::geteuid().is_root() {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{TEST_UID}:{TEST_GID}"))
            .arg(home.path())
            .status()
            .expect("chown");
        assert!(status.success());
    }
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    home
}

fn run_in(project: &Project, home: &Path, extra: &[&str], argv: &[&str]) -> std::process::Output {
    let mut cmd = project.command();
    cmd.env("HOME", home)
        .env(
            "PATH",
            format!("/usr/bin:/bin:{}", home.join(".cargo/bin").display()),
        )
        .arg("run")
        .args(extra)
        .arg("--")
        .args(argv)
        .stdin(std::process::Stdio::null());
    cmd.output().expect("sandbox starts")
}

#[test]
fn a_command_only_on_the_host_names_where_and_the_flag() {
    for who in identities("a_command_only_on_the_host_names_where_and_the_flag") {
        let project = Project::new(who);
        let home = fake_rust_home(who);
        let out = run_in(&project, home.path(), &[], &["cargo", "build"]);
        assert_eq!(out.status.code(), Some(127), "{who:?}");
        let stderr = text(&out.stderr);
        let cargo = home.path().join(".cargo/bin/cargo");
        assert!(
            stderr.contains(&format!(
                "cannot execute 'cargo': No such file or directory; it is {} on the host",
                cargo.display()
            )) && stderr.contains("--tool rust"),
            "{who:?}: {stderr}"
        );
        // Not on the host either: the plain message.
        let out = run_in(&project, home.path(), &[], &["no-such-tool-anywhere"]);
        assert_eq!(out.status.code(), Some(127), "{who:?}");
        assert!(
            !text(&out.stderr).contains("on the host"),
            "{who:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn tool_rust_runs_cargo_read_only_without_its_credentials() {
    for who in identities("tool_rust_runs_cargo_read_only_without_its_credentials") {
        let project = Project::new(who);
        let home = fake_rust_home(who);
        let cargo_home = home.path().join(".cargo");
        let out = run_in(&project, home.path(), &["--tool", "rust"], &["cargo"]);
        assert_ok(&out, &format!("--tool rust as {who:?}"));
        assert_eq!(
            text(&out.stdout),
            format!("fake cargo CARGO_HOME={}\n", cargo_home.display()),
            "{who:?}"
        );
        // The profile form, and the attack: read the token, replace cargo.
        let attack = format!(
            "cat {home}/.cargo/credentials.toml; ls -a {home}; \
             echo 'echo owned' > {home}/.cargo/bin/cargo 2>/dev/null; true",
            home = home.path().display()
        );
        let profile = project.write(
            "tools.toml",
            "version = 1\nextends = \"strict\"\n[tools]\nexpose = [\"rust\"]\n",
        );
        let out = run_in(
            &project,
            home.path(),
            &["--profile", profile.to_str().expect("UTF-8")],
            &["/bin/sh", "-c", &attack],
        );
        assert_ok(&out, &format!("[tools] as {who:?}"));
        let stdout = text(&out.stdout);
        assert!(!stdout.contains("cio-secret"), "{who:?} read the token");
        assert!(!stdout.contains("credentials"), "{who:?}: {stdout}");
        assert!(
            std::fs::read_to_string(cargo_home.join("bin/cargo"))
                .expect("cargo")
                .contains("fake cargo"),
            "{who:?} replaced cargo"
        );
    }
}

#[test]
fn an_unknown_tool_is_a_usage_error_naming_the_known_ones() {
    let project = Project::new(Who::User);
    let out = project.run_with(&["--tool", "cobol"], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("the known tools are rust, node, python"),
        "{}",
        text(&out.stderr)
    );
}
