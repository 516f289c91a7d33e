//! Changes a face makes to a loaded profile: `sandbox run`'s flags, the
//! daemon's request (held to the caller's rule), and the toolchains of
//! `[tools]`. Each face checks what it is given (a flag names itself, the
//! daemon refuses what a caller may not widen); the policy is changed
//! here only, so the same override means the same thing on every face.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::policy::{Decision, NetworkMode, NetworkPolicy, Policy};

/// What to change in a loaded policy; unset fields leave it as it is.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// Host paths made readable (absolute; a path already listed is not
    /// listed twice).
    pub read: Vec<PathBuf>,
    /// Host directories made writable (absolute).
    pub write: Vec<PathBuf>,
    /// Host paths hidden.
    pub hide: Vec<PathBuf>,
    /// Built-in toolchains to expose (`[tools] expose`), by name; a name
    /// that is none is refused where the toolchains are exposed
    /// (`tools::expose`, when the run is prepared).
    pub tools: Vec<String>,
    /// Variables set in the command's environment (replacing the profile's).
    pub env: BTreeMap<String, String>,
    /// Memory limit in bytes.
    pub memory: Option<u64>,
    /// Most tasks at once.
    pub pids: Option<u64>,
    /// CPU share in cores.
    pub cpu: Option<f64>,
    /// Wall-clock limit.
    pub timeout: Option<Duration>,
    /// Cap on stdout and stderr together, in bytes.
    pub output: Option<u64>,
    /// Size of the private /tmp in bytes.
    pub tmp_size: Option<u64>,
    /// Broker actions pre-approved for the run (`fs.write:dist/**`).
    pub grants: Vec<String>,
    /// The network, in place of the profile's.
    pub network: Option<NetworkPolicy>,
    /// Names resolved to these addresses by the proxy and `net.http`.
    pub resolve: Vec<(String, IpAddr)>,
    /// Review mode on (never off: only ever narrows what reaches the
    /// project).
    pub review: bool,
}

/// An override that cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    /// A grant that names no broker action.
    #[error("grant {grant:?}: {reason}")]
    Grant {
        /// The grant as given.
        grant: String,
        /// Why it does not parse.
        reason: String,
    },
}

impl Overrides {
    /// Change `policy` as these overrides say. Nothing is changed when one
    /// of them is refused.
    pub fn apply(self, policy: &mut Policy) -> Result<(), OverrideError> {
        for grant in &self.grants {
            grant
                .parse::<crate::action::Permission>()
                .map_err(|err| OverrideError::Grant {
                    grant: grant.clone(),
                    reason: err.to_string(),
                })?;
        }
        let fs = &mut policy.filesystem;
        for path in self.read {
            if !fs.read.contains(&path) {
                fs.read.push(path);
            }
        }
        fs.write.extend(self.write);
        fs.hide.extend(self.hide);
        if let Some(tmp_size) = self.tmp_size {
            fs.tmp_size = tmp_size;
        }
        fs.review |= self.review;
        for tool in self.tools {
            if !policy.tools.contains(&tool) {
                policy.tools.push(tool);
            }
        }
        policy.env.set.extend(self.env);
        let limits = &mut policy.limits;
        for (value, limit) in [
            (self.memory, &mut limits.memory),
            (self.pids, &mut limits.pids),
        ] {
            if value.is_some() {
                *limit = value;
            }
        }
        if self.cpu.is_some() {
            limits.cpu = self.cpu;
        }
        if self.timeout.is_some() {
            limits.timeout = self.timeout;
        }
        if self.output.is_some() {
            limits.output = self.output;
        }
        for grant in self.grants {
            policy.broker.rules.insert(grant, Decision::Allow);
        }
        apply_network(&mut policy.network, self.network, &self.resolve);
        Ok(())
    }
}

/// `requested` in place of the profile's network, then the pins. The
/// profile's own pins stay with an allowlist, whose proxy uses them.
pub fn apply_network(
    network: &mut NetworkPolicy,
    requested: Option<NetworkPolicy>,
    pins: &[(String, IpAddr)],
) {
    if let Some(requested) = requested {
        let pinned = std::mem::take(&mut network.resolve);
        *network = requested;
        if network.mode == NetworkMode::Allowlist {
            network.resolve = pinned;
        }
    }
    // Pins serve the proxy and the broker's net.http, which every mode has.
    network.resolve.extend(pins.iter().cloned());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_overrides_change_nothing() {
        let policy = crate::profile::load("strict").unwrap();
        let mut changed = policy.clone();
        Overrides::default().apply(&mut changed).unwrap();
        assert_eq!(format!("{changed:?}"), format!("{policy:?}"));
    }

    #[test]
    fn each_override_lands_where_the_profile_keeps_it() {
        let mut policy = crate::profile::load("strict").unwrap();
        let already = policy.filesystem.read[0].clone();
        let reads = policy.filesystem.read.len();
        Overrides {
            read: vec![already, "/opt/sdk".into()],
            write: vec!["/srv/out".into()],
            tools: vec!["rust".into()],
            memory: Some(1 << 20),
            timeout: Some(Duration::from_secs(5)),
            tmp_size: Some(4 << 20),
            grants: vec!["fs.write:dist/**".into()],
            network: Some(NetworkPolicy::from_spec("none").unwrap()),
            ..Overrides::default()
        }
        .apply(&mut policy)
        .unwrap();
        assert_eq!(policy.filesystem.read.len(), reads + 1);
        assert_eq!(
            policy.filesystem.write.last().unwrap(),
            &PathBuf::from("/srv/out")
        );
        assert_eq!(policy.tools, ["rust"]);
        assert_eq!(policy.limits.memory, Some(1 << 20));
        assert_eq!(policy.limits.timeout, Some(Duration::from_secs(5)));
        assert_eq!(policy.filesystem.tmp_size, 4 << 20);
        assert_eq!(
            policy.broker.rules.get("fs.write:dist/**"),
            Some(&Decision::Allow)
        );
        assert_eq!(policy.network.mode, NetworkMode::None);
    }

    #[test]
    fn a_refused_override_changes_nothing() {
        let policy = crate::profile::load("strict").unwrap();
        let overrides = Overrides {
            memory: Some(1),
            grants: vec!["fs.fly".into()],
            ..Overrides::default()
        };
        let mut changed = policy.clone();
        assert!(overrides.apply(&mut changed).is_err());
        assert_eq!(changed.limits.memory, policy.limits.memory);
    }

    #[test]
    fn an_allowlist_keeps_the_profiles_pins_and_other_modes_drop_them() {
        let pin = ("api.test".to_string(), IpAddr::from([127, 0, 0, 1]));
        let mut profile = NetworkPolicy::from_spec("allow:api.test").unwrap();
        profile.resolve = [pin.clone()].into();
        let mut allow = profile.clone();
        apply_network(
            &mut allow,
            Some(NetworkPolicy::from_spec("allow:api.test:443").unwrap()),
            &[],
        );
        assert_eq!(allow.resolve, [pin].into());
        let mut none = profile.clone();
        let flag = ("b.test".to_string(), IpAddr::from([127, 0, 0, 2]));
        apply_network(
            &mut none,
            Some(NetworkPolicy::from_spec("none").unwrap()),
            std::slice::from_ref(&flag),
        );
        assert_eq!(none.resolve, [flag].into());
    }
}
