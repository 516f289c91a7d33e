//! What the environment's tests share. Every environment here is a faked
//! tree: the machine the tests run on has no AppArmor, no Kubernetes and no
//! Podman, so their detection and messages are checked against the files
//! those would leave.

use std::ffi::OsString;

use nix::errno::Errno;

use super::detect::beneath;
use super::{Environment, Explanation, Refusal};

/// A faked root: `files` are (absolute path, content).
pub(super) struct Tree(pub(super) tempfile::TempDir);

impl Tree {
    pub(super) fn new(files: &[(&str, &str)]) -> Tree {
        let tree = Tree(tempfile::tempdir().expect("tempdir"));
        // An unprivileged process in the initial user namespace, no filter.
        tree.write("/proc/self/uid_map", "         0          0 4294967295\n");
        tree.write(
            "/proc/self/status",
            "Name:\tsandbox\nUid:\t1000\t1000\t1000\t1000\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n",
        );
        for (path, content) in files {
            tree.write(path, content);
        }
        tree
    }

    pub(super) fn write(&self, path: &str, content: &str) {
        let path = beneath(self.0.path(), path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
    }

    pub(super) fn detect(&self) -> Environment {
        self.detect_with(&[])
    }

    pub(super) fn detect_with(&self, vars: &[(&str, &str)]) -> Environment {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut env = Environment::detect_at(self.0.path(), |name| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
        });
        // A kernel on which a run without namespaces starts, unless a
        // test says otherwise.
        env.landlock_abi = Some(crate::landlock::TARGET_ABI_NUMBER);
        env
    }
}

pub(super) const ROOT_STATUS: &str =
    "Uid:\t0\t0\t0\t0\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n";
pub(super) const FILTERED_STATUS: &str =
    "Uid:\t1000\t1000\t1000\t1000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n";

pub(super) fn clone_eperm(env: &Environment) -> Explanation {
    env.explain(&Refusal::UserNamespace(Errno::EPERM))
        .expect("explained")
}

pub(super) const UBUNTU: [(&str, &str); 3] = [
    (
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "1\n",
    ),
    ("/sys/module/apparmor/parameters/enabled", "Y\n"),
    ("/proc/self/attr/apparmor/current", "unconfined\n"),
];
