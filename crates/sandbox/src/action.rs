//! The actions the broker knows, spelt one way everywhere: on the channel
//! (`method`), in profile rules, in a skill's declared permissions, in
//! stored grants and in CLI flags (`--grant ACTION[:PATTERN]`).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// How much harm an action can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Risk {
    /// Reading inside the granted view.
    Low,
    /// Changing files.
    Medium,
    /// Deleting, running commands, the network, secrets.
    High,
}

/// Whether `target` matches a rule pattern: `*` is any run of characters
/// but `/`, `?` one such character, `\` makes the next one literal, and a
/// `**` segment any number of segments (`dist/**` is everything below dist).
pub fn glob_matches(pattern: &str, target: &str) -> bool {
    crate::project::patterns::glob_path(pattern, target)
}

/// One broker action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// `fs.read`
    FsRead,
    /// `fs.write`
    FsWrite,
    /// `fs.list`
    FsList,
    /// `fs.stat`
    FsStat,
    /// `fs.mkdir`
    FsMkdir,
    /// `fs.delete`
    FsDelete,
    /// `terminal.run`
    TerminalRun,
    /// `net.http`
    NetHttp,
    /// `secrets.get`
    SecretsGet,
    /// `secrets.read`
    SecretsRead,
    /// `log`
    Log,
    /// `permission.query`
    PermissionQuery,
}

impl Action {
    /// Every action, in the order error messages list them.
    pub const ALL: [Action; 12] = [
        Action::FsRead,
        Action::FsWrite,
        Action::FsList,
        Action::FsStat,
        Action::FsMkdir,
        Action::FsDelete,
        Action::TerminalRun,
        Action::NetHttp,
        Action::SecretsGet,
        Action::SecretsRead,
        Action::Log,
        Action::PermissionQuery,
    ];

    /// The action's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::FsRead => "fs.read",
            Action::FsWrite => "fs.write",
            Action::FsList => "fs.list",
            Action::FsStat => "fs.stat",
            Action::FsMkdir => "fs.mkdir",
            Action::FsDelete => "fs.delete",
            Action::TerminalRun => "terminal.run",
            Action::NetHttp => "net.http",
            Action::SecretsGet => "secrets.get",
            Action::SecretsRead => "secrets.read",
            Action::Log => "log",
            Action::PermissionQuery => "permission.query",
        }
    }

    /// How much harm it can do.
    pub fn risk(self) -> Risk {
        match self {
            Action::FsRead
            | Action::FsList
            | Action::FsStat
            | Action::Log
            | Action::PermissionQuery => Risk::Low,
            Action::FsWrite | Action::FsMkdir => Risk::Medium,
            Action::FsDelete
            | Action::TerminalRun
            | Action::NetHttp
            | Action::SecretsGet
            | Action::SecretsRead => Risk::High,
        }
    }

    /// Whether its target is a path beneath the project root.
    pub fn takes_path(self) -> bool {
        matches!(
            self,
            Action::FsRead
                | Action::FsWrite
                | Action::FsList
                | Action::FsStat
                | Action::FsMkdir
                | Action::FsDelete
        )
    }

    /// The valid names, for error messages.
    pub fn names() -> String {
        Action::ALL.map(Action::as_str).join(", ")
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no broker action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// Not an action.
    #[error("{name:?} is not a broker action ({})", Action::names())]
    Unknown {
        /// What was given.
        name: String,
    },
    /// `ACTION:` with nothing after the colon.
    #[error("{given:?}: the pattern after ':' is empty")]
    EmptyPattern {
        /// What was given.
        given: String,
    },
    /// A pattern can never match a name with a NUL byte.
    #[error("{given:?}: the pattern contains a NUL byte")]
    NulInPattern {
        /// What was given.
        given: String,
    },
    /// A `net.http` pattern is a host as the allowlist writes one.
    #[error("{given:?}: {source} (a net.http pattern is a host: api.example.com, *.example.com, HOST:PORT)")]
    BadHostPattern {
        /// What was given.
        given: String,
        /// Why the host pattern does not parse.
        source: crate::net::allow::AllowError,
    },
}

/// Whether a rule's, grant's or declaration's `pattern` covers `target`:
/// paths and programs by glob ([`glob_matches`]); `net.http` targets
/// (`host:port`) as an allowlist entry covers them, so that
/// `net.http:api.example.com` means that host on ports 443 and 80, as it
/// does in `network.allow`.
pub fn pattern_matches(action: Action, pattern: &str, target: &str) -> bool {
    match action {
        Action::NetHttp => crate::net::allow::target_matches(pattern, target),
        _ => glob_matches(pattern, target),
    }
}

/// [`pattern_matches`] for an action named in a profile or a stored grant
/// (an unknown name matches by glob).
pub fn pattern_matches_named(action: &str, pattern: &str, target: &str) -> bool {
    match action.parse() {
        Ok(known) => pattern_matches(known, pattern, target),
        Err(_) => glob_matches(pattern, target),
    }
}

impl FromStr for Action {
    type Err = ActionError;
    fn from_str(name: &str) -> Result<Action, ActionError> {
        Action::ALL
            .into_iter()
            .find(|a| a.as_str() == name)
            .ok_or_else(|| ActionError::Unknown {
                name: name.to_string(),
            })
    }
}

impl serde::Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Action {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Action, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// An action, optionally narrowed to targets matching a pattern:
/// `fs.write` or `fs.write:dist/**` (a rule key, a declared permission, a
/// `--grant` value).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permission {
    /// The action.
    pub action: Action,
    /// Targets it covers; None: every target.
    pub pattern: Option<String>,
}

impl Permission {
    /// Whether it covers `action` on `target` (a target-less request is
    /// covered only by a permission without a pattern).
    pub fn covers(&self, action: Action, target: Option<&str>) -> bool {
        self.action == action
            && match (&self.pattern, target) {
                (None, _) => true,
                (Some(pattern), Some(target)) => pattern_matches(action, pattern, target),
                (Some(_), None) => false,
            }
    }
}

impl FromStr for Permission {
    type Err = ActionError;
    fn from_str(given: &str) -> Result<Permission, ActionError> {
        let (action, pattern) = match given.split_once(':') {
            Some((_, "")) => {
                return Err(ActionError::EmptyPattern {
                    given: given.to_string(),
                })
            }
            Some((_, pattern)) if pattern.contains('\0') => {
                return Err(ActionError::NulInPattern {
                    given: given.to_string(),
                })
            }
            Some((action, pattern)) => (action, Some(pattern.to_string())),
            None => (given, None),
        };
        let action: Action = action.parse()?;
        if let (Action::NetHttp, Some(pattern)) = (action, &pattern) {
            crate::net::allow::check_entry(pattern).map_err(|source| {
                ActionError::BadHostPattern {
                    given: given.to_string(),
                    source,
                }
            })?;
        }
        Ok(Permission { action, pattern })
    }
}

impl<'de> serde::Deserialize<'de> for Permission {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Permission, D::Error> {
        let given = std::borrow::Cow::<'de, str>::deserialize(d)?;
        given.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            Some(pattern) => write!(f, "{}:{pattern}", self.action),
            None => write!(f, "{}", self.action),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_list_the_valid_ones() {
        for action in Action::ALL {
            assert_eq!(action.as_str().parse::<Action>(), Ok(action));
        }
        let err = "fs.raed".parse::<Action>().unwrap_err().to_string();
        assert!(err.contains("fs.read, fs.write"), "{err}");
        let p: Permission = "fs.write:dist/**".parse().unwrap();
        assert_eq!(p.to_string(), "fs.write:dist/**");
        assert!(p.covers(Action::FsWrite, Some("dist/a.js")));
        assert!(!p.covers(Action::FsWrite, Some("src/a.js")));
        assert!(!p.covers(Action::FsWrite, None));
        assert!(matches!(
            "fs.write:".parse::<Permission>(),
            Err(ActionError::EmptyPattern { .. })
        ));
    }

    #[test]
    fn a_net_http_pattern_is_a_host_as_the_allowlist_writes_it() {
        let p: Permission = "net.http:api.example.com".parse().unwrap();
        assert!(p.covers(Action::NetHttp, Some("api.example.com:443")));
        assert!(p.covers(Action::NetHttp, Some("api.example.com:80")));
        assert!(!p.covers(Action::NetHttp, Some("api.example.com:8080")));
        assert!(!p.covers(Action::NetHttp, Some("api.example.com.evil.test:443")));
        let p: Permission = "net.http:*.example.com:8080".parse().unwrap();
        assert!(p.covers(Action::NetHttp, Some("a.b.example.com:8080")));
        assert!(!p.covers(Action::NetHttp, Some("example.com:8080")));
        let err = "net.http:api example.com"
            .parse::<Permission>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("a net.http pattern is a host"), "{err}");
    }
}
