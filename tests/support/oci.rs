//! The one driver of `sandbox oci` in the tests: a busybox root (no image
//! registry is reachable) and the runtime behind a wrapper, because an
//! engine passes its runtime no environment of its own choosing, driven
//! the way an engine drives it (runc's command line, or Podman pointed at
//! the wrapper).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

pub const BUSYBOX: &str = "/bin/busybox";

/// How long a container's `sleep` lasts: past any test, however loaded the
/// machine (every test deletes its containers, and `OciRuntime`'s drop
/// deletes what a failed one left).
pub const LONGER_THAN_ANY_TEST: &str = "86400";

/// A container id unique to this test process, named after `tag`.
pub fn container_id(tag: &str) -> String {
    format!("attack-{}", super::marker(tag))
}

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

    /// `create` of `bundle` as `id`: the container keeps runc's stdio, so
    /// it goes to the file `output` returns (with create's own errors).
    pub fn create(&self, bundle: &Path, id: &str) -> bool {
        let log = std::fs::File::create(self.output_path(id)).expect("log");
        Command::new(self.wrapper())
            .arg("--root")
            .arg(self.runc_root())
            .args(["create", "--bundle"])
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .status()
            .expect("create")
            .success()
    }

    pub fn output_path(&self, id: &str) -> PathBuf {
        self.path().join(format!("output-{id}"))
    }

    /// What container `id` (and its `create`) wrote on stdout and stderr.
    pub fn output(&self, id: &str) -> String {
        std::fs::read_to_string(self.output_path(id)).unwrap_or_default()
    }

    /// `start`, then wait until the container's process ended.
    pub fn start_and_wait(&self, id: &str) {
        let started = self.oci(&["start", id]);
        assert!(started.status.success(), "{}", text(&started.stderr));
        super::wait::until_true(
            &format!("container {id} to stop"),
            std::time::Duration::from_secs(60),
            || self.status(id) == "stopped",
        );
    }

    /// A container named `tag` running `sleep`, created and started.
    pub fn running(&self, tag: &str) -> String {
        let id = container_id(tag);
        let bundle = self.bundle(tag, &["/bin/sleep", LONGER_THAN_ANY_TEST], |_| {});
        assert!(self.create(&bundle, &id), "{}", self.output(&id));
        let started = self.oci(&["start", &id]);
        assert!(started.status.success(), "{}", text(&started.stderr));
        id
    }

    /// `exec --process` of `process` (a process JSON) into `id`.
    pub fn exec(&self, id: &str, process: &Value) -> Output {
        let path = self
            .path()
            .join(format!("process-{}.json", super::marker("p")));
        std::fs::write(&path, serde_json::to_vec(process).unwrap()).unwrap();
        self.oci(&["exec", "--process", path.to_str().unwrap(), id])
    }

    /// `podman` with storage of its own (vfs, the cgroupfs manager) in
    /// this directory, and `runtime`.
    pub fn podman(&self, runtime: &Path) -> Command {
        let mut command = Command::new("podman");
        command
            .arg("--root")
            .arg(self.path().join("storage"))
            .arg("--runroot")
            .arg(self.path().join("runroot"))
            .arg("--runtime")
            .arg(runtime)
            .args(["--cgroup-manager", "cgroupfs", "--storage-driver", "vfs"])
            .stdin(Stdio::null());
        command
    }

    /// `podman run --rm` of `script` on the busybox root with `options`;
    /// `runtime` None is ours.
    pub fn podman_run_with(
        &self,
        runtime: Option<&Path>,
        options: &[&str],
        script: &str,
    ) -> Output {
        let ours = self.wrapper();
        self.podman(runtime.unwrap_or(&ours))
            .args(["run", "--rm"])
            // Root here may lack CAP_SYS_RESOURCE: podman must not raise rlimits.
            .args([
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
            ])
            .args(options)
            .arg("--rootfs")
            .arg(self.rootfs())
            .args(["/bin/sh", "-c", script])
            .output()
            .expect("podman runs")
    }

    /// [`OciRuntime::podman_run_with`] of ours, off the network.
    pub fn podman_run(&self, script: &str) -> Output {
        self.podman_run_with(None, &["--network", "none"], script)
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
