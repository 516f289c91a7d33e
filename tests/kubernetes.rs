//! `sandbox oci` as a Kubernetes RuntimeClass handler, driven through
//! containerd's CRI as the kubelet drives it (tests/support/cri.rs): a pod
//! sandbox (the pause container, the pod's namespaces), containers joining
//! it, `ExecSync` (`kubectl exec`), stop and remove, and the refusals of a
//! pod that shares the host.
//!
//! Each test starts a containerd of its own with the CRI plugin on and
//! `packaging/kubernetes/containerd-sandbox.toml` as its `sandbox` handler
//! (its BinaryName pointed at the build under test), beside a plain `runc`
//! handler. containerd runs in a mount namespace with a private /run (the
//! shims' sockets, the pods' network namespace files) and a network
//! namespace of its own, where the CNI bridge plugin connects the pods: the
//! host's network is never touched. Images come from Debian's static
//! busybox, imported with `ctr` (no registry is reachable). Needs root,
//! containerd, ctr, runc, unshare, ip, the CNI plugins and busybox-static
//! (`.ci/run` installs them).

mod support;

#[path = "support/cri.rs"]
mod cri;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cri::{ContainerConfig, Cri, PodSandboxConfig};
use support::oci::{text, OciRuntime};

const CNI_BIN: &str = "/usr/lib/cni";
const BUSYBOX_IMAGE: &str = "localhost/sandbox-test/busybox:1";
const PAUSE_IMAGE: &str = "localhost/sandbox-test/pause:1";
const VOLUME_IMAGE: &str = "localhost/sandbox-test/volume:1";

fn usable(test: &str) -> bool {
    support::oci::usable(
        test,
        &[
            "containerd",
            "containerd-shim-runc-v2",
            "ctr",
            "runc",
            "unshare",
            "ip",
            "tar",
        ],
        "containerd runc iproute2 containernetworking-plugins busybox-static",
    ) && support::require(
        test,
        &format!("the CNI plugins in {CNI_BIN} (apt-get install containernetworking-plugins)"),
        ["bridge", "loopback", "host-local"]
            .iter()
            .all(|p| Path::new(CNI_BIN).join(p).exists()),
    )
}

/// The repository's file `path`.
fn repository_file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// A node: containerd with the CRI on, the `sandbox` handler as shipped,
/// a `runc` handler, and the busybox and pause images.
struct Node {
    runtime: OciRuntime,
    daemon: Option<Child>,
    cri: Option<Cri>,
}

impl std::ops::Deref for Node {
    type Target = OciRuntime;
    fn deref(&self) -> &OciRuntime {
        &self.runtime
    }
}

impl Node {
    /// A node whose `oci.toml` is the shipped one, with its profiles read
    /// from the repository's packaging/kubernetes/profiles.
    fn start() -> Node {
        Node::start_with(&shipped_settings(""))
    }

    fn start_with(settings: &str) -> Node {
        let mut node = Node {
            runtime: OciRuntime::new("sandbox-k8s-", settings),
            daemon: None,
            cri: None,
        };
        let path = node.path().to_owned();
        // Where this node's containerd and "kubelet" keep pods' files.
        node.runtime.write_settings(&format!(
            "{settings}\nengine_dirs = [\"{0}/root\", \"{0}/state\"]\nkubelet_dir = \"{0}/kubelet\"\n",
            path.display()
        ));
        node.write_cni_config();
        std::fs::write(path.join("config.toml"), node.containerd_config()).expect("config.toml");
        let log = std::fs::File::create(path.join("containerd.log")).expect("containerd.log");
        // A private /run for the shims' sockets and the pods' netns files,
        // and a network namespace of containerd's own for the CNI bridge.
        let daemon = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--net", "sh", "-c"])
            .arg(
                "mount -t tmpfs -o mode=0755 sandbox-k8s-run /run && ip link set lo up && \
                 exec containerd --config \"$1/config.toml\"",
            )
            .arg("sh")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("containerd starts");
        node.daemon = Some(daemon);
        let socket = path.join("containerd.sock");
        let mut last = String::new();
        let answered = support::wait::holds_within(Duration::from_secs(60), || {
            if !socket.exists() {
                return false;
            }
            match Cri::connect(&socket).and_then(|cri| cri.version().map(|_| cri)) {
                Ok(cri) => {
                    node.cri = Some(cri);
                    true
                }
                Err(err) => {
                    last = err;
                    false
                }
            }
        });
        assert!(
            answered,
            "containerd's CRI did not answer ({last}):\n{}",
            node.daemon_log()
        );
        node.import_images();
        node
    }

    fn cri(&self) -> &Cri {
        self.cri.as_ref().expect("connected")
    }

    fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.path().join("containerd.log")).unwrap_or_default()
    }

    /// containerd's configuration: its directories here, the CRI's images
    /// and CNI, a plain `runc` handler, and the shipped `sandbox` handler
    /// with the wrapper as its binary.
    fn containerd_config(&self) -> String {
        let dir = self.path().display().to_string();
        let handler = repository_file("packaging/kubernetes/containerd-sandbox.toml")
            .replace(
                "\"/usr/bin/sandbox-runc\"",
                &format!("{:?}", self.wrapper().display().to_string()),
            )
            .replace(
                "\"/run/sandbox-runc\"",
                &format!("{:?}", self.runc_root().display().to_string()),
            );
        assert!(
            handler.contains(&self.wrapper().display().to_string()),
            "the shipped handler names its BinaryName as the test expects"
        );
        format!(
            "version = 2\n\
             root = \"{dir}/root\"\n\
             state = \"{dir}/state\"\n\
             [grpc]\n  address = \"{dir}/containerd.sock\"\n\
             [ttrpc]\n  address = \"{dir}/containerd.sock.ttrpc\"\n\
             [debug]\n  address = \"\"\n\
             [metrics]\n  address = \"\"\n\
             [plugins.\"io.containerd.grpc.v1.cri\"]\n\
             \x20 sandbox_image = \"{PAUSE_IMAGE}\"\n\
             \x20 stream_server_address = \"127.0.0.1\"\n\
             \x20 stream_server_port = \"0\"\n\
             \x20 restrict_oom_score_adj = true\n\
             \x20 [plugins.\"io.containerd.grpc.v1.cri\".cni]\n\
             \x20   bin_dir = \"{CNI_BIN}\"\n\
             \x20   conf_dir = \"{dir}/cni\"\n\
             \x20 [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n\
             \x20   default_runtime_name = \"runc\"\n\
             \x20   [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n\
             \x20     runtime_type = \"io.containerd.runc.v2\"\n\
             \x20     [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n\
             \x20       Root = \"{dir}/plain-runc-root\"\n\
             {handler}"
        )
    }

    /// A bridge network for the pods, in containerd's network namespace.
    fn write_cni_config(&self) {
        let dir = self.path().join("cni");
        std::fs::create_dir_all(&dir).expect("cni dir");
        let config = serde_json::json!({
            "cniVersion": "0.4.0",
            "name": "sandbox-test",
            "plugins": [{
                "type": "bridge",
                "bridge": "sbxtest0",
                "isGateway": true,
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.88.77.0/24"}]],
                    "dataDir": self.path().join("cni-ipam"),
                },
            }],
        });
        std::fs::write(
            dir.join("10-sandbox-test.conflist"),
            serde_json::to_vec(&config).expect("json"),
        )
        .expect("cni config");
    }

    fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new("ctr")
            .arg("--address")
            .arg(self.path().join("containerd.sock"))
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr runs")
    }

    /// The busybox root as two images (a plain one and a pause image that
    /// sleeps), in Docker's archive format, imported into the CRI's
    /// namespace.
    fn import_images(&self) {
        let dir = self.path().join("image");
        std::fs::create_dir_all(&dir).expect("image dir");
        let layer = dir.join("layer.tar");
        let tarred = Command::new("tar")
            .arg("-C")
            .arg(self.rootfs())
            .args(["--owner=0", "--group=0", "-cf"])
            .arg(&layer)
            .arg(".")
            .status()
            .expect("tar");
        assert!(tarred.success());
        let diff_id = sha256_file(&layer);
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        let mut manifest = Vec::new();
        let no_volumes = serde_json::json!({});
        for (name, tag, entrypoint, volumes) in [
            (
                "busybox",
                BUSYBOX_IMAGE,
                serde_json::json!(null),
                &no_volumes,
            ),
            (
                "pause",
                PAUSE_IMAGE,
                serde_json::json!(["/bin/sleep", support::oci::LONGER_THAN_ANY_TEST]),
                &no_volumes,
            ),
            // As a database's image declares its data directory.
            (
                "volume",
                VOLUME_IMAGE,
                serde_json::json!(null),
                &serde_json::json!({"/data": {}}),
            ),
        ] {
            let config = serde_json::json!({
                "architecture": arch,
                "os": "linux",
                "config": {"Env": ["PATH=/bin"], "Entrypoint": entrypoint, "Volumes": volumes},
                "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
            });
            let file = format!("{name}.json");
            std::fs::write(dir.join(&file), serde_json::to_vec(&config).unwrap()).unwrap();
            manifest.push(serde_json::json!({
                "Config": file, "RepoTags": [tag], "Layers": ["layer.tar"],
            }));
        }
        std::fs::write(
            dir.join("manifest.json"),
            serde_json::to_vec(&manifest).unwrap(),
        )
        .unwrap();
        let archive = self.path().join("images.tar");
        let tarred = Command::new("tar")
            .arg("-C")
            .arg(&dir)
            .arg("-cf")
            .arg(&archive)
            .args([
                "manifest.json",
                "busybox.json",
                "pause.json",
                "volume.json",
                "layer.tar",
            ])
            .status()
            .expect("tar");
        assert!(tarred.success());
        let imported = self.ctr(&["images", "import", archive.to_str().unwrap()]);
        assert!(
            imported.status.success(),
            "ctr images import: {}{}",
            text(&imported.stdout),
            text(&imported.stderr)
        );
    }

    /// A pod's configuration named `name`, with `annotations`.
    fn pod_config(&self, name: &str, annotations: &[(&str, &str)]) -> PodSandboxConfig {
        let marker = support::marker(name);
        PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: marker.clone(),
                uid: format!("uid-{marker}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: name.into(),
            log_directory: self.path().join("pods").join(&marker).display().to_string(),
            labels: HashMap::new(),
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: String::new(),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    // shareProcessNamespace: the containers see the pause
                    // container's process, and share its pid namespace.
                    namespace_options: Some(cri::NamespaceOption {
                        network: cri::NAMESPACE_POD,
                        pid: cri::NAMESPACE_POD,
                        ipc: cri::NAMESPACE_POD,
                        userns_options: None,
                    }),
                    privileged: false,
                }),
            }),
        }
    }

    /// A busybox container that sleeps, named `name`.
    fn container_config(&self, name: &str) -> ContainerConfig {
        ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: BUSYBOX_IMAGE.into(),
            }),
            command: vec![
                "/bin/sleep".into(),
                support::oci::LONGER_THAN_ANY_TEST.into(),
            ],
            log_path: format!("{name}.log"),
            linux: Some(cri::LinuxContainerConfig {
                resources: None,
                security_context: Some(cri::LinuxContainerSecurityContext {
                    capabilities: None,
                    privileged: false,
                    namespace_options: Some(cri::NamespaceOption {
                        network: cri::NAMESPACE_POD,
                        pid: cri::NAMESPACE_POD,
                        ipc: cri::NAMESPACE_POD,
                        userns_options: None,
                    }),
                }),
            }),
            ..ContainerConfig::default()
        }
    }

    /// Run `pod` with the `sandbox` handler and a container of `container`
    /// in it, started; returns the pod's and the container's ids.
    fn run(&self, pod: &PodSandboxConfig, container: &ContainerConfig) -> (String, String) {
        self.run_with("sandbox", pod, container)
    }

    fn run_with(
        &self,
        handler: &str,
        pod: &PodSandboxConfig,
        container: &ContainerConfig,
    ) -> (String, String) {
        let pod_id = self
            .cri()
            .run_pod(pod, handler)
            .unwrap_or_else(|err| panic!("RunPodSandbox: {err}\n{}", self.daemon_log()));
        let container_id = self
            .cri()
            .create_container(&pod_id, container, pod)
            .unwrap_or_else(|err| panic!("CreateContainer: {err}"));
        self.cri()
            .start_container(&container_id)
            .unwrap_or_else(|err| panic!("StartContainer: {err}"));
        (pod_id, container_id)
    }

    /// `kubectl exec` of a shell script; its stdout, asserting it succeeded.
    fn exec(&self, container: &str, script: &str) -> String {
        let out = self
            .cri()
            .exec_sync(container, &["/bin/sh", "-c", script])
            .unwrap_or_else(|err| panic!("ExecSync: {err}"));
        assert_eq!(
            out.exit_code,
            0,
            "{script}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Stop and remove `pod` the kubelet's way: its containers, then it;
    /// then no process of theirs is left: not the containers' own (their
    /// pids, noted first), not a supervisor (`oci create ... ID`) or a shim
    /// (`-id ID`), whose command lines name them.
    fn tear_down(&self, pod: &str, containers: &[&str]) {
        let ids: Vec<&str> = containers.iter().copied().chain([pod]).collect();
        let pids: Vec<String> = ids.iter().map(|id| self.task_pid(id)).collect();
        self.remove(pod, containers);
        for id in &ids {
            let left = support::wait_until_gone(id, 60);
            assert!(left.is_empty(), "processes of {id} left: {left:?}");
        }
        for pid in pids {
            assert!(
                support::wait::holds_within(Duration::from_secs(60), || {
                    !Path::new(&format!("/proc/{pid}")).exists()
                }),
                "a container's process {pid} outlived its pod"
            );
        }
    }

    fn remove(&self, pod: &str, containers: &[&str]) {
        for container in containers {
            self.cri()
                .stop_container(container, 0)
                .expect("StopContainer");
            self.cri()
                .remove_container(container)
                .expect("RemoveContainer");
        }
        self.cri().stop_pod(pod).expect("StopPodSandbox");
        self.cri().remove_pod(pod).expect("RemovePodSandbox");
    }

    /// `mount --bind SOURCE TARGET` in containerd's mount namespace, as
    /// the kubelet mounts a volume's subPath.
    fn bind_in_containerd(&self, source: &Path, target: &Path) {
        std::fs::create_dir_all(target).expect("mount point");
        let pid = self.daemon.as_ref().expect("containerd").id().to_string();
        let mounted = Command::new("nsenter")
            .args(["-t", &pid, "-m", "mount", "--bind"])
            .arg(source)
            .arg(target)
            .status()
            .expect("nsenter");
        assert!(mounted.success(), "mount --bind {}", source.display());
    }

    /// The host's pid of a pod's (pause) or container's process, from its
    /// shim's pid file.
    fn task_pid(&self, id: &str) -> String {
        let file = self
            .path()
            .join("state/io.containerd.runtime.v2.task/k8s.io")
            .join(id)
            .join("init.pid");
        std::fs::read_to_string(&file)
            .unwrap_or_else(|err| panic!("{}: {err}", file.display()))
            .trim()
            .to_owned()
    }

    /// What the runtime left: containers in runc's state (the handler's
    /// root holds a directory per containerd namespace) and `sandbox oci`'s
    /// records of containers.
    fn leftovers(&self) -> Vec<String> {
        let entries = |dir: &Path| -> Vec<PathBuf> {
            std::fs::read_dir(dir)
                .map(|entries| entries.flatten().map(|e| e.path()).collect())
                .unwrap_or_default()
        };
        let mut left = entries(&self.runc_root().join("k8s.io"));
        // Nor a pinned mount source (a mount of the host's, kept apart).
        for root in entries(&self.state_dir().join("sources")) {
            left.extend(entries(&root));
        }
        // One directory per runc root the runtime was given, each holding
        // a record per live container.
        for root in entries(&self.state_dir().join("containers")) {
            left.extend(entries(&root));
        }
        left.iter().map(|p| p.display().to_string()).collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.cri = None;
        if let Some(mut daemon) = self.daemon.take() {
            let _ = daemon.kill();
            let _ = daemon.wait();
        }
    }
}

/// The shipped `oci.toml` with its profiles read from the repository, then
/// `more`.
fn shipped_settings(more: &str) -> String {
    let profiles = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/kubernetes/profiles");
    format!(
        "{}\n{more}",
        repository_file("packaging/kubernetes/oci.toml")
            .replace("/etc/sandbox/profiles", &profiles.display().to_string())
    )
}

fn sha256_file(path: &Path) -> String {
    use sha2::Digest;
    let bytes = std::fs::read(path).expect("read");
    format!("{:x}", sha2::Sha256::digest(&bytes))
}

fn status_field(status: &str, field: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default()
}

#[test]
fn a_pod_runs_with_the_layers_and_joins_its_pause_container() {
    if !usable("a_pod_runs_with_the_layers_and_joins_its_pause_container") {
        return;
    }
    let node = Node::start();
    let pod = node.pod_config("layers", &[]);
    let (pod_id, container) = node.run(&pod, &node.container_config("job"));

    let status = node.exec(container.as_str(), "cat /proc/self/status");
    assert_eq!(status_field(&status, "NoNewPrivs"), "1", "{status}");
    assert_eq!(status_field(&status, "Seccomp"), "2", "{status}");
    assert_eq!(status_field(&status, "CapEff"), "0000000000000000");
    assert_eq!(status_field(&status, "CapPrm"), "0000000000000000");
    // Landlock: the image's files are read-only, /tmp is scratch.
    let denied = node
        .cri()
        .exec_sync(&container, &["/bin/touch", "/etc/planted"])
        .expect("ExecSync");
    assert_ne!(denied.exit_code, 0, "wrote /etc in the image");
    assert!(
        text(&denied.stderr).contains("Permission denied"),
        "{}",
        text(&denied.stderr)
    );
    node.exec(&container, "touch /tmp/scratch && test -f /tmp/scratch");

    // The pod's namespaces: the pause container (its sleep is pid 1 of the
    // shared pid namespace) and this container share network, ipc and
    // pid, none of them the host's. Seen from the host: inside, Landlock
    // keeps an exec from reading another domain's /proc/PID/ns.
    let pause = node.exec(&container, "cat /proc/1/cmdline | tr '\\0' ' '");
    assert!(pause.contains("sleep"), "pid 1 is not the pause: {pause}");
    let (pause_pid, job_pid) = (node.task_pid(&pod_id), node.task_pid(&container));
    for ns in ["net", "ipc", "pid", "uts"] {
        let of = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).expect("ns link");
        assert_eq!(
            of(&job_pid),
            of(&pause_pid),
            "{ns}: not the pause container's"
        );
        assert_ne!(of(&job_pid), of("self"), "{ns}: the host's");
    }
    assert!(
        node.cri()
            .exec_sync(&container, &["/bin/ls", "-l", "/proc/1/ns/"])
            .is_ok_and(|out| !text(&out.stdout).contains("net:[")),
        "an exec read the pause container's namespaces across Landlock domains"
    );
    // The pod's network is the bridge's, as the CNI plugin connected it.
    let addresses = node.exec(&container, "cat /proc/net/fib_trie");
    assert!(addresses.contains("10.88.77."), "{addresses}");

    // Both the pause container and the job went through sandbox oci.
    let enforced: Vec<_> = node
        .audit()
        .into_iter()
        .filter(|line| line["event"] == "enforced")
        .collect();
    assert!(
        enforced.len() >= 3,
        "the pause, the job and the execs were not all enforced: {enforced:?}"
    );
    // What the init measured inside each: Landlock in full and the
    // profile's filter (the CRI asked for no seccomp profile of its own,
    // so `Seccomp: 2` above is the profile's).
    for line in &enforced {
        assert_eq!(line["enforced"]["no_new_privs"], true, "{line}");
        assert_eq!(line["enforced"]["landlock"], "full", "{line}");
        assert_eq!(line["enforced"]["seccomp_programs"], 1, "{line}");
    }

    node.tear_down(&pod_id, &[&container]);
    assert_eq!(node.leftovers(), Vec::<String>::new());
}

/// The pod's uid as the kubelet would name its directory.
fn pod_uid(pod: &PodSandboxConfig) -> String {
    pod.metadata.as_ref().expect("metadata").uid.clone()
}

/// The error of starting `container` in `pod`: CreateContainer records it,
/// StartContainer runs the runtime's `create`.
fn start_error(
    node: &Node,
    pod_id: &str,
    pod: &PodSandboxConfig,
    container: &ContainerConfig,
) -> String {
    let id = match node.cri().create_container(pod_id, container, pod) {
        Ok(id) => id,
        Err(err) => return err,
    };
    let err = node
        .cri()
        .start_container(&id)
        .err()
        .unwrap_or_else(|| panic!("container started: {:?}", node.cri().container_status(&id)));
    node.cri().remove_container(&id).expect("RemoveContainer");
    err
}

#[test]
fn pods_that_share_the_host_are_refused_with_the_reason_in_their_events() {
    if !usable("pods_that_share_the_host_are_refused_with_the_reason_in_their_events") {
        return;
    }
    let node = Node::start();
    // hostPID, hostIPC, hostNetwork: the pod sandbox itself is refused.
    for (setting, field) in [
        ("hostPID", "pid"),
        ("hostIPC", "ipc"),
        ("hostNetwork", "uts"),
    ] {
        let mut pod = node.pod_config(setting, &[]);
        let options = pod
            .linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .and_then(|c| c.namespace_options.as_mut())
            .expect("namespace options");
        match setting {
            "hostPID" => options.pid = cri::NAMESPACE_NODE,
            "hostIPC" => options.ipc = cri::NAMESPACE_NODE,
            _ => options.network = cri::NAMESPACE_NODE,
        }
        let err = node
            .cri()
            .run_pod(&pod, "sandbox")
            .expect_err(&format!("{setting} pod ran"));
        assert!(
            err.contains(&format!("has no \"{field}\" entry"))
                && err.contains(&format!("Kubernetes: {setting}")),
            "{setting}: {err}"
        );
    }

    // In a pod of its own: privileged, a host device, hostPath volumes.
    let mut pod = node.pod_config("privileged", &[]);
    pod.linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .expect("security context")
        .privileged = true;
    let pod_id = node.cri().run_pod(&pod, "sandbox").expect("RunPodSandbox");

    let mut privileged = node.container_config("privileged");
    privileged
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .expect("security context")
        .privileged = true;
    let err = start_error(&node, &pod_id, &pod, &privileged);
    assert!(
        err.contains("linux.devices gives the container the host's device"),
        "{err}"
    );

    let disk = ["/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/loop0"]
        .into_iter()
        .find(|d| Path::new(d).exists())
        .expect("a block device on this machine");
    let mut device = node.container_config("device");
    device.devices.push(cri::Device {
        container_path: "/dev/disk0".into(),
        host_path: disk.into(),
        permissions: "rw".into(),
    });
    let err = start_error(&node, &pod_id, &pod, &device);
    assert!(
        err.contains("/dev/disk0") && err.contains("host's device"),
        "{err}"
    );

    let other_pod = node
        .path()
        .join("kubelet/pods/someone-else/volumes/kubernetes.io~secret/token");
    std::fs::create_dir_all(&other_pod).expect("mkdir");
    for source in [Path::new("/etc"), &other_pod] {
        let mut host_path = node.container_config("host-path");
        host_path.mounts.push(cri::Mount {
            container_path: "/host".into(),
            host_path: source.display().to_string(),
            readonly: true,
        });
        let err = start_error(&node, &pod_id, &pod, &host_path);
        assert!(
            err.contains(&format!("mount the host's {}", source.display()))
                && err.contains("host_paths"),
            "{err}"
        );
    }
    // A hostPath of "/" with subPath "etc": the kubelet mounts the host's
    // /etc below the pod's own directory, and hands that path over.
    let subpath = node
        .path()
        .join("kubelet/pods")
        .join(pod_uid(&pod))
        .join("volume-subpaths/host/job/0");
    node.bind_in_containerd(Path::new("/etc"), &subpath);
    // A relative path, which runc finds below the container's bundle (its
    // image's root: a link there leads anywhere).
    for source in [subpath.display().to_string(), "rootfs/tmp".to_owned()] {
        let mut mounted = node.container_config("host-path");
        mounted.mounts.push(cri::Mount {
            container_path: "/host".into(),
            host_path: source.clone(),
            readonly: false,
        });
        let err = start_error(&node, &pod_id, &pod, &mounted);
        assert!(
            err.contains(&format!("would mount {source:?}"))
                || err.contains(&format!("mount the host's {source}")),
            "{source}: {err}"
        );
    }
    node.cri().stop_pod(&pod_id).expect("StopPodSandbox");
    node.cri().remove_pod(&pod_id).expect("RemovePodSandbox");
    assert_eq!(node.leftovers(), Vec::<String>::new());
}

#[test]
fn a_pods_own_volumes_and_the_operators_host_paths_are_mounted() {
    if !usable("a_pods_own_volumes_and_the_operators_host_paths_are_mounted") {
        return;
    }
    let shared = tempfile::tempdir_in("/tmp").expect("tempdir");
    let node = Node::start_with(&shipped_settings(&format!(
        "host_paths = [\"{}\"]",
        shared.path().display()
    )));
    let pod = node.pod_config("volumes", &[]);
    // An emptyDir as the kubelet makes it: below pods/<uid>/volumes.
    let empty_dir = node
        .path()
        .join("kubelet/pods")
        .join(pod_uid(&pod))
        .join("volumes/kubernetes.io~empty-dir/scratch");
    std::fs::create_dir_all(&empty_dir).expect("mkdir");
    let mut job = node.container_config("job");
    job.mounts = vec![
        cri::Mount {
            container_path: "/scratch".into(),
            host_path: empty_dir.display().to_string(),
            readonly: false,
        },
        cri::Mount {
            container_path: "/shared".into(),
            host_path: shared.path().display().to_string(),
            readonly: false,
        },
    ];
    // A subPath of the emptyDir, mounted where the kubelet mounts one.
    let sub = empty_dir.join("conf");
    std::fs::create_dir_all(&sub).expect("mkdir");
    let subpath = node
        .path()
        .join("kubelet/pods")
        .join(pod_uid(&pod))
        .join("volume-subpaths/scratch/job/0");
    node.bind_in_containerd(&sub, &subpath);
    job.mounts.push(cri::Mount {
        container_path: "/conf".into(),
        host_path: subpath.display().to_string(),
        readonly: false,
    });
    // An image that declares a VOLUME: containerd makes it below its
    // directory of the container.
    job.image = Some(cri::ImageSpec {
        image: VOLUME_IMAGE.into(),
    });
    let (pod_id, container) = node.run(&pod, &job);
    node.exec(
        &container,
        "echo kept > /scratch/a && echo kept > /shared/b && echo kept > /conf/c \
         && echo kept > /data/d",
    );
    assert_eq!(std::fs::read_to_string(sub.join("c")).unwrap(), "kept\n");
    assert_eq!(
        std::fs::read_to_string(empty_dir.join("a")).unwrap(),
        "kept\n"
    );
    assert_eq!(
        std::fs::read_to_string(shared.path().join("b")).unwrap(),
        "kept\n"
    );
    node.tear_down(&pod_id, &[&container]);
}

#[test]
fn a_pod_chooses_only_a_profile_the_operator_allows_and_its_limits_are_ceilings() {
    if !usable("a_pod_chooses_only_a_profile_the_operator_allows_and_its_limits_are_ceilings") {
        return;
    }
    let node = Node::start();
    let refused = node.pod_config("permissive", &[("run.sandbox.profile", "permissive")]);
    let err = node
        .cri()
        .run_pod(&refused, "sandbox")
        .expect_err("a pod chose permissive");
    assert!(err.contains("annotation_profiles"), "{err}");

    let standard = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/kubernetes/profiles/pod-standard.toml")
        .display()
        .to_string();
    let pod = node.pod_config("standard", &[("run.sandbox.profile", &standard)]);
    // The pod asks for more memory than the profile's ceiling, and a
    // second container for less.
    let mut big = node.container_config("big");
    let mut small = node.container_config("small");
    for (config, bytes) in [(&mut big, 64_i64 << 30), (&mut small, 64 << 20)] {
        config.linux.as_mut().expect("linux").resources = Some(cri::LinuxContainerResources {
            memory_limit_in_bytes: bytes,
            ..Default::default()
        });
    }
    let (pod_id, big_id) = node.run(&pod, &big);
    let small_id = node
        .cri()
        .create_container(&pod_id, &small, &pod)
        .expect("CreateContainer");
    node.cri()
        .start_container(&small_id)
        .expect("StartContainer");
    let ceiling = sandbox::profile::load(&standard)
        .expect("pod-standard loads")
        .limits
        .memory
        .expect("standard has a memory limit");
    assert_eq!(memory_limit(&node.task_pid(&big_id)), ceiling);
    assert_eq!(memory_limit(&node.task_pid(&small_id)), 64 << 20);
    let profiles: Vec<_> = node
        .audit()
        .into_iter()
        .filter(|line| line["event"] == "enforced")
        .map(|line| line["profile"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        profiles.iter().all(|p| p.contains("pod-standard")),
        "{profiles:?}"
    );
    node.tear_down(&pod_id, &[&big_id, &small_id]);
}

/// The memory limit of `pid`'s cgroup, read from the host: cgroup v1's
/// memory hierarchy or the unified one.
fn memory_limit(pid: &str) -> u64 {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    let v1 = cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"))
    });
    let file = v1
        .or_else(|| {
            let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
            Some(format!("/sys/fs/cgroup{path}/memory.max"))
        })
        .expect("a memory cgroup");
    std::fs::read_to_string(&file)
        .unwrap_or_else(|err| panic!("{file}: {err}"))
        .trim()
        .parse()
        .unwrap_or_else(|err| panic!("{file}: {err}"))
}

#[test]
fn what_the_kubelet_learns_of_user_namespaces_is_true() {
    if !usable("what_the_kubelet_learns_of_user_namespaces_is_true") {
        return;
    }
    let node = Node::start();
    let features = node.oci(&["features"]);
    assert!(features.status.success(), "{}", text(&features.stderr));
    let features: serde_json::Value = serde_json::from_slice(&features.stdout).expect("JSON");
    assert_eq!(
        features["annotations"]["run.sandbox.user-namespaces"],
        "true"
    );
    // containerd 2 tells the kubelet a handler supports hostUsers: false
    // when the runtime's features say it has idmapped mounts; this passes
    // runc's answer on unchanged.
    let idmap = |f: &serde_json::Value| f["linux"]["mountExtensions"]["idmap"]["enabled"].clone();
    let runc: serde_json::Value = serde_json::from_slice(
        &Command::new("runc")
            .arg("features")
            .output()
            .expect("runc")
            .stdout,
    )
    .expect("runc's JSON");
    assert_eq!(idmap(&features), idmap(&runc));

    let status = node.cri().status().expect("Status");
    match status.runtime_handlers.iter().find(|h| h.name == "sandbox") {
        Some(handler) => {
            let told = handler.features.as_ref().is_some_and(|f| f.user_namespaces);
            assert_eq!(told, idmap(&features) == true, "{handler:?}");
        }
        None => {
            // containerd 1.6's CRI predates user-namespaced pods: it tells
            // the kubelet nothing of its handlers, and drops a pod's
            // userns_options unread, so such a pod runs in the host's user
            // namespace. docs/kubernetes.md says so.
            assert!(status.runtime_handlers.is_empty());
            let mut pod = node.pod_config("userns", &[]);
            pod.linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
                .and_then(|c| c.namespace_options.as_mut())
                .expect("namespace options")
                .userns_options = Some(cri::UserNamespace {
                mode: cri::NAMESPACE_POD,
                uids: vec![cri::IdMapping {
                    host_id: 100_000,
                    container_id: 0,
                    length: 65_536,
                }],
                gids: vec![cri::IdMapping {
                    host_id: 100_000,
                    container_id: 0,
                    length: 65_536,
                }],
            });
            let (pod_id, container) = node.run(&pod, &node.container_config("job"));
            let map = node.exec(&container, "cat /proc/self/uid_map");
            eprintln!(
                "what_the_kubelet_learns_of_user_namespaces_is_true: containerd here reports no \
                 handler features and ignored the pod's user namespace (uid_map: {})",
                map.trim()
            );
            assert_eq!(
                map.split_whitespace().collect::<Vec<_>>(),
                ["0", "0", "4294967295"],
                "containerd gave the pod a user namespace: update docs/kubernetes.md and this test"
            );
            node.tear_down(&pod_id, &[&container]);
        }
    }
}

/// Not a test: scripts/bench-kubernetes runs it (release build, the
/// shipped `sandbox` as SANDBOX_BENCH_BIN) for what the handler adds to a
/// pod's start-up, RunPodSandbox to a started container, against plain
/// runc through the same CRI, the two handlers in turn.
#[test]
#[ignore = "a benchmark: scripts/bench-kubernetes"]
fn pod_start_up_figures() {
    assert!(
        usable("pod_start_up_figures"),
        "the benchmark needs what the tests need"
    );
    let node = Node::start();
    if let Some(bin) = std::env::var_os("SANDBOX_BENCH_BIN") {
        let wrapper = std::fs::read_to_string(node.wrapper()).expect("wrapper");
        let wrapper = wrapper.replace(support::sandbox_bin(), &bin.to_string_lossy());
        std::fs::write(node.wrapper(), wrapper).expect("wrapper");
    }
    let runs: usize = std::env::var("SANDBOX_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    let mut times: HashMap<&str, Vec<f64>> = HashMap::new();
    // One pod of each first, unmeasured: images unpacked, caches warm.
    for round in 0..=runs {
        for handler in ["runc", "sandbox"] {
            let pod = node.pod_config("bench", &[]);
            let container = node.container_config("job");
            let started = std::time::Instant::now();
            let (pod_id, container_id) = node.run_with(handler, &pod, &container);
            let took = started.elapsed().as_secs_f64() * 1000.0;
            node.tear_down(&pod_id, &[&container_id]);
            if round > 0 {
                times.entry(handler).or_default().push(took);
            }
        }
    }
    let summary = |handler: &str| {
        let mut list = times[handler].clone();
        list.sort_by(f64::total_cmp);
        let median = list[list.len() / 2];
        let p95 = list[(list.len() * 95 / 100).min(list.len() - 1)];
        (median, p95)
    };
    let (runc_median, runc_p95) = summary("runc");
    let (ours_median, ours_p95) = summary("sandbox");
    println!("pod start-up through containerd's CRI (RunPodSandbox, CreateContainer, StartContainer), {runs} pods each");
    println!("  runc           median {runc_median:7.1} ms   p95 {runc_p95:7.1} ms");
    println!("  sandbox oci    median {ours_median:7.1} ms   p95 {ours_p95:7.1} ms");
    println!(
        "  added          median {:+7.1} ms ({:.2}x)",
        ours_median - runc_median,
        ours_median / runc_median
    );
}

/// A pod that can write in a directory it mounts (its own volume, a host
/// path shared with other pods) swaps that directory for a link to `/`
/// between the runtime's check and runc's mount, with
/// `renameat2(RENAME_EXCHANGE)` in a loop: an attacker's review won this
/// within six tries. Every try now either is refused or mounts the
/// directory that was checked.
#[test]
fn a_mount_source_swapped_for_a_link_while_it_is_checked_is_never_the_host() {
    let test = "a_mount_source_swapped_for_a_link_while_it_is_checked_is_never_the_host";
    if !usable(test) {
        return;
    }
    let shared = tempfile::tempdir_in("/tmp").expect("tempdir");
    let checked = shared.path().join("d");
    let link = shared.path().join("l");
    std::fs::create_dir(&checked).expect("mkdir");
    std::fs::write(checked.join("only-in-the-volume"), "").expect("marker");
    std::os::unix::fs::symlink("/", &link).expect("symlink");
    let node = Node::start_with(&shipped_settings(&format!(
        "host_paths = [\"{}\"]",
        shared.path().display()
    )));
    let pod = node.pod_config("swap", &[]);
    let pod_id = node.cri().run_pod(&pod, "sandbox").expect("RunPodSandbox");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, checked, link) = (stop.clone(), checked.clone(), link.clone());
        std::thread::spawn(move || {
            let mut swaps = 0_u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let swapped = nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &checked,
                    nix::fcntl::AT_FDCWD,
                    &link,
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                );
                swaps += u64::from(swapped.is_ok());
            }
            swaps
        })
    };
    let (mut refused, mut mounted) = (0, 0);
    for attempt in 0..30 {
        let mut job = node.container_config(&format!("job{attempt}"));
        job.mounts.push(cri::Mount {
            container_path: "/mnt".into(),
            host_path: checked.display().to_string(),
            readonly: true,
        });
        let Ok(id) = node.cri().create_container(&pod_id, &job, &pod) else {
            refused += 1;
            continue;
        };
        if let Err(err) = node.cri().start_container(&id) {
            assert!(
                err.contains("changed while it was checked") || err.contains("host_paths"),
                "{err}"
            );
            refused += 1;
        } else {
            let listing = node.exec(&id, "ls -a /mnt");
            assert!(
                listing.contains("only-in-the-volume") && !listing.contains("etc"),
                "try {attempt} mounted something else than the checked directory: {listing}"
            );
            mounted += 1;
            node.cri().stop_container(&id, 0).expect("StopContainer");
        }
        node.cri().remove_container(&id).expect("RemoveContainer");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    eprintln!("{test}: {swaps} swaps; {mounted} tries mounted the checked directory, {refused} were refused");
    assert!(swaps > 0, "the swap never happened");
    node.cri().stop_pod(&pod_id).expect("StopPodSandbox");
    node.cri().remove_pod(&pod_id).expect("RemovePodSandbox");
    assert_eq!(node.leftovers(), Vec::<String>::new());
}
