//! What the tests that drive `sandbox oci` share: a busybox root (no image
//! registry is reachable) and the runtime behind a wrapper, because an
//! engine passes its runtime no environment of its own choosing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

pub const BUSYBOX: &str = "/bin/busybox";

const APPLETS: [&str; 13] = [
    "sh", "cat", "echo", "touch", "grep", "head", "sleep", "tty", "ls", "id", "rm", "ln", "true",
];

/// Whether the test can run: root, every one of `tools`, and a static
/// `/bin/busybox` for the root filesystem. Otherwise a loud skip (a
/// failure under `SANDBOX_TEST_REQUIRE=1`); `packages` is what to install.
pub fn usable(test: &str, tools: &[&str], packages: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    super::require(
        test,
        &format!(
            "root with {} and a static {BUSYBOX} (apt-get install {packages})",
            tools.join(", ")
        ),
        root && super::commands_exist(tools) && super::is_static_elf(Path::new(BUSYBOX)),
    )
}

/// A temporary directory holding `rootfs/` (busybox, its applets, a
/// sticky `/tmp`, empty `/etc` and `/work`), the runtime's settings
/// (`oci.toml`, with its state and audit directories here) and
/// `sandbox-runc`, a wrapper that appends each command line it is given to
/// `calls.log` and runs `sandbox oci` with those settings.
pub struct OciRuntime {
    dir: tempfile::TempDir,
}

impl OciRuntime {
    pub fn new(prefix: &str, settings: &str) -> OciRuntime {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/tmp")
            .expect("tempdir");
        let runtime = OciRuntime { dir };
        let rootfs = runtime.rootfs();
        for sub in ["bin", "tmp", "etc", "work"] {
            std::fs::create_dir_all(rootfs.join(sub)).expect("mkdir");
        }
        std::fs::copy(BUSYBOX, rootfs.join("bin/busybox")).expect("busybox");
        for applet in APPLETS {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).expect("applet");
        }
        std::fs::set_permissions(rootfs.join("tmp"), std::fs::Permissions::from_mode(0o1777))
            .expect("chmod");
        runtime.write_settings(settings);
        std::fs::write(
            runtime.wrapper(),
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\nSANDBOX_OCI_CONFIG={} exec {} oci \"$@\"\n",
                runtime.calls().display(),
                runtime.settings().display(),
                super::sandbox_bin()
            ),
        )
        .expect("wrapper");
        std::fs::set_permissions(runtime.wrapper(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        runtime
    }

    /// Replaces the settings: the state and audit directories here, then
    /// `settings`.
    pub fn write_settings(&self, settings: &str) {
        std::fs::write(
            self.settings(),
            format!(
                "state_dir = \"{}\"\naudit_dir = \"{}\"\n{settings}",
                self.state_dir().display(),
                self.path().join("audit").display()
            ),
        )
        .expect("settings");
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn rootfs(&self) -> PathBuf {
        self.path().join("rootfs")
    }

    /// The runtime as an engine is given it.
    pub fn wrapper(&self) -> PathBuf {
        self.path().join("sandbox-runc")
    }

    pub fn settings(&self) -> PathBuf {
        self.path().join("oci.toml")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.path().join("sandbox-state")
    }

    /// The command lines the runtime was run with, one a line.
    pub fn calls(&self) -> PathBuf {
        self.path().join("calls.log")
    }

    /// The runc state directory `oci` gives the runtime as `--root`.
    pub fn runc_root(&self) -> PathBuf {
        self.path().join("runc-root")
    }

    /// A bundle named `name`: `runc spec`'s default on the busybox root
    /// running `args`, then `edit`ed (as an engine or an attacker would).
    pub fn bundle(&self, name: &str, args: &[&str], edit: impl FnOnce(&mut Value)) -> PathBuf {
        let bundle = self.path().join(format!("bundle-{name}"));
        std::fs::create_dir_all(&bundle).expect("bundle");
        let made = Command::new("runc")
            .args(["spec", "--bundle"])
            .arg(&bundle)
            .status()
            .expect("runc spec");
        assert!(made.success());
        let path = bundle.join("config.json");
        let mut spec: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        spec["root"]["path"] = self.rootfs().to_string_lossy().into();
        spec["root"]["readonly"] = false.into();
        spec["process"]["terminal"] = false.into();
        spec["process"]["args"] = json!(args);
        edit(&mut spec);
        std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
        bundle
    }

    /// `sandbox oci --root RUNC_ROOT ARGS`, as an engine runs it, output
    /// collected.
    pub fn oci(&self, args: &[&str]) -> Output {
        Command::new(self.wrapper())
            .arg("--root")
            .arg(self.runc_root())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("sandbox oci")
    }

    /// The status `state` gives for `id` (empty when it gives none).
    pub fn status(&self, id: &str) -> String {
        let out = self.oci(&["state", id]);
        let state: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        state["status"].as_str().unwrap_or("").to_owned()
    }

    /// `sandbox oci`'s record of container `id`, while it has one.
    pub fn container_dir(&self, id: &str) -> Option<PathBuf> {
        super::oci_container_dir(&self.state_dir(), id)
    }

    /// Every audit line of every container, parsed.
    pub fn audit(&self) -> Vec<Value> {
        let mut lines = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.path().join("audit")) else {
            return lines;
        };
        for entry in entries.flatten() {
            let content = std::fs::read_to_string(entry.path()).expect("audit");
            lines.extend(
                content
                    .lines()
                    .map(|l| serde_json::from_str::<Value>(l).expect("audit line")),
            );
        }
        lines
    }
}

impl Drop for OciRuntime {
    /// No container of a failed test outlives it.
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.runc_root()) else {
            return;
        };
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            let _ = Command::new("runc")
                .arg("--root")
                .arg(self.runc_root())
                .args(["delete", "--force", &id])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
