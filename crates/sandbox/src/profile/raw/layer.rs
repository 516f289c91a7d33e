//! One profile file after its own checks: the [`Layer`] it sets, and the
//! [`Source`] its errors point into.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::{RawProfile, RawVersion};
use crate::profile::error::ProfileError;
use crate::profile::policy::{
    Decision, Enforcement, NetworkMode, Policy, ProjectAccess, SyscallMode,
};

/// The text of one profile and the name used for it in messages.
pub(crate) struct Source<'a> {
    /// A file name as the user gave it, or a built-in's name.
    pub origin: &'a str,
    /// The TOML text.
    pub text: &'a str,
}

impl Source<'_> {
    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_column(&self, offset: usize) -> (usize, usize) {
        let offset = crate::text::floor_char_boundary(self.text, offset);
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        (line, column)
    }

    /// An [`ProfileError::Invalid`] at `span`.
    pub fn error(&self, span: Range<usize>, message: impl Into<String>) -> ProfileError {
        let (line, column) = self.line_column(span.start);
        ProfileError::Invalid {
            origin: self.origin.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }

    fn toml_error(&self, err: &toml::de::Error) -> ProfileError {
        self.error(err.span().unwrap_or(0..0), err.message().trim_end())
    }
}

/// One profile file after its own checks, before `extends` is applied.
/// `None` means "not set here": the value comes from the parent.
#[derive(Debug, Default)]
pub(crate) struct Layer {
    pub extends: Option<Spanned<String>>,
    pub project: Option<ProjectAccess>,
    pub read: ListEdit<PathBuf>,
    pub read_if_exists: ListEdit<PathBuf>,
    pub write: ListEdit<PathBuf>,
    pub hide: ListEdit<PathBuf>,
    pub secrets: ListEdit<String>,
    pub protect: ListEdit<String>,
    pub hardlinks: Option<crate::project::HardlinkPolicy>,
    pub tmp_size: Option<u64>,
    pub review: Option<bool>,
    pub review_size: Option<u64>,
    pub network: Option<NetworkMode>,
    pub network_allow: ListEdit<String>,
    pub network_resolve: Option<BTreeMap<String, std::net::IpAddr>>,
    pub memory: Option<Option<u64>>,
    pub pids: Option<Option<u64>>,
    pub cpu: Option<Option<f64>>,
    pub timeout: Option<Option<Duration>>,
    pub output: Option<Option<u64>>,
    pub nofile: Option<Option<u64>>,
    pub syscall_mode: Option<SyscallMode>,
    pub syscall_allow: ListEdit<String>,
    pub syscall_deny: ListEdit<String>,
    pub env_pass: ListEdit<String>,
    pub env_set: BTreeMap<String, String>,
    pub env_git_identity: Option<bool>,
    pub broker_default: Option<Decision>,
    pub broker_rules: BTreeMap<String, Decision>,
    pub userns: Option<Enforcement>,
    pub landlock: Option<Enforcement>,
    pub seccomp: Option<Enforcement>,
    pub cgroups: Option<Enforcement>,
    pub tools: ListEdit<String>,
}

/// One list key as a layer writes it: `KEY` replaces the inherited list,
/// `KEY_add` appends to it (once each), `KEY_remove` takes entries out, so a
/// child profile adjusts its parent's list without repeating it.
#[derive(Debug)]
pub(crate) struct ListEdit<T> {
    pub replace: Option<Vec<T>>,
    pub add: Vec<T>,
    pub remove: Vec<T>,
}

impl<T> Default for ListEdit<T> {
    fn default() -> Self {
        ListEdit {
            replace: None,
            add: Vec::new(),
            remove: Vec::new(),
        }
    }
}

impl<T: PartialEq> ListEdit<T> {
    /// Replace, then add, then remove.
    pub fn apply(self, list: &mut Vec<T>) {
        if let Some(replacement) = self.replace {
            *list = replacement;
        }
        for item in self.add {
            if !list.contains(&item) {
                list.push(item);
            }
        }
        list.retain(|item| !self.remove.contains(item));
    }
}

impl Layer {
    /// Parse and check one file. Pure: nothing outside `source` is looked at.
    pub fn parse(source: &Source) -> Result<Layer, ProfileError> {
        let version: RawVersion = toml::from_str(source.text).map_err(|e| source.toml_error(&e))?;
        match version.version {
            None => {
                return Err(source.error(
                    0..0,
                    "`version` is missing: add `version = 1` as the first line",
                ))
            }
            Some(v) if *v.get_ref() != toml::Value::Integer(1) => {
                return Err(source.error(
                    v.span(),
                    format!(
                        "unsupported profile version {}: this sandbox reads version 1 only",
                        v.get_ref()
                    ),
                ))
            }
            Some(_) => {}
        }
        let raw: RawProfile = toml::from_str(source.text).map_err(|e| source.toml_error(&e))?;
        raw.check(source)
    }

    /// Overwrite `policy` with every value this layer sets.
    pub fn apply(self, policy: &mut Policy) {
        fn set<T>(target: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *target = value;
            }
        }
        let fs = &mut policy.filesystem;
        set(&mut fs.project, self.project);
        self.read.apply(&mut fs.read);
        self.read_if_exists.apply(&mut fs.read_if_exists);
        self.write.apply(&mut fs.write);
        self.hide.apply(&mut fs.hide);
        self.secrets.apply(&mut fs.secrets);
        self.protect.apply(&mut fs.protect);
        set(&mut fs.hardlinks, self.hardlinks);
        set(&mut fs.tmp_size, self.tmp_size);
        set(&mut fs.review, self.review);
        set(&mut fs.review_size, self.review_size);
        set(&mut policy.network.mode, self.network);
        self.network_allow.apply(&mut policy.network.allow);
        set(&mut policy.network.resolve, self.network_resolve);
        // A mode without a proxy has nothing to list: a layer that turns
        // the proxy off (`mode = "none"` over a parent's allowlist) gets
        // exactly the mode it names.
        if policy.network.mode != NetworkMode::Allowlist {
            policy.network.allow.clear();
            policy.network.resolve.clear();
        }
        let limits = &mut policy.limits;
        set(&mut limits.memory, self.memory);
        set(&mut limits.pids, self.pids);
        set(&mut limits.cpu, self.cpu);
        set(&mut limits.timeout, self.timeout);
        set(&mut limits.output, self.output);
        set(&mut limits.nofile, self.nofile);
        set(&mut policy.syscalls.mode, self.syscall_mode);
        self.syscall_allow.apply(&mut policy.syscalls.allow);
        self.syscall_deny.apply(&mut policy.syscalls.deny);
        self.env_pass.apply(&mut policy.env.pass);
        // Maps merge key by key: a child adds or changes entries, it cannot drop the parent's.
        policy.env.set.extend(self.env_set);
        set(&mut policy.env.git_identity, self.env_git_identity);
        set(&mut policy.broker.default, self.broker_default);
        policy.broker.rules.extend(self.broker_rules);
        let enforce = &mut policy.enforce;
        set(&mut enforce.userns, self.userns);
        set(&mut enforce.landlock, self.landlock);
        set(&mut enforce.seccomp, self.seccomp);
        set(&mut enforce.cgroups, self.cgroups);
        self.tools.apply(&mut policy.tools);
    }
}
