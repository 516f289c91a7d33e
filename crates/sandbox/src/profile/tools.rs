//! Toolchains a run can be given by name (`[tools] expose = ["rust"]`,
//! `sandbox run --tool rust`): CI installs them below the home directory,
//! which no profile shows otherwise.
//!
//! Each definition exposes only the directories the toolchain runs from,
//! read-only, and never a file that may hold a credential: for Rust not
//! `~/.cargo` itself (its `credentials.toml` holds the registry token and
//! `config.toml` may hold others) and not `~/.cargo/git` (checkouts keep
//! their remote URL, which may carry a token); for Node not `~/.npmrc` nor
//! the `etc/npmrc` of an nvm-installed Node (`npm config --global` writes
//! tokens there), which are hidden; for Python not `~/.local/share`
//! (keyrings). The rest of the home directory stays out of view.

use std::path::{Path, PathBuf};

use super::overrides::Overrides;
use super::policy::Policy;

/// A toolchain definition.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// Its name in `[tools] expose` and `--tool`.
    pub name: &'static str,
    /// Directories below the home directory shown read-only.
    pub read: &'static [&'static str],
    /// Variables set to a path below the home directory.
    pub env: &'static [(&'static str, &'static str)],
    /// Directories below the home directory put before the profile's PATH.
    pub path: &'static [&'static str],
}

/// The built-in toolchains.
pub const TOOLS: [Tool; 3] = [
    Tool {
        name: "rust",
        read: &[".rustup", ".cargo/bin", ".cargo/registry"],
        env: &[("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")],
        path: &[".cargo/bin"],
    },
    Tool {
        name: "node",
        read: &[".nvm"],
        env: &[("NVM_DIR", ".nvm")],
        // Plus the bin directory of each installed Node (see `node_bins`).
        path: &[],
    },
    Tool {
        name: "python",
        read: &[".pyenv", ".local/bin", ".local/lib"],
        env: &[("PYENV_ROOT", ".pyenv"), ("PYTHONUSERBASE", ".local")],
        path: &[".pyenv/shims", ".pyenv/bin", ".local/bin"],
    },
];

/// The names of the built-in toolchains, for messages.
pub fn known_names() -> String {
    TOOLS.map(|t| t.name).join(", ")
}

/// The definition named `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().find(|t| t.name == name)
}

/// Why a toolchain cannot be exposed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// No such built-in definition.
    #[error("unknown tool `{0}`: the known tools are {known}", known = known_names())]
    Unknown(String),
    /// None of its directories exists.
    #[error("tool `{name}`: none of {looked} exists below {home}; install the toolchain there or drop `{name}` from --tool / [tools]")]
    Missing {
        /// The tool.
        name: String,
        /// The directories looked for.
        looked: String,
        /// The home directory.
        home: PathBuf,
    },
    /// No home directory to look in.
    #[error("tool `{0}`: no home directory ($HOME is unset or not absolute)")]
    NoHome(String),
    /// What a toolchain shows could not be applied to the policy.
    #[error("exposing the toolchains: {0}")]
    Override(#[from] super::overrides::OverrideError),
}

/// The caller's home directory, where toolchains are installed.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h != Path::new("/"))
}

/// The directory below `home` for `relative`, by its real path (a toolchain
/// directory may be a symlink to another disk), when it exists.
fn real(home: &Path, relative: &str) -> Option<PathBuf> {
    std::fs::canonicalize(home.join(relative)).ok()
}

/// The bin directories of nvm's Node versions, newest first.
fn node_bins(home: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(home.join(".nvm/versions/node")) else {
        return Vec::new();
    };
    let mut versions: Vec<(Vec<u64>, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let numbers = name
                .trim_start_matches('v')
                .split('.')
                .map(|n| n.parse::<u64>().ok())
                .collect::<Option<Vec<u64>>>()?;
            Some((numbers, e.path()))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

/// Expose every tool named in `policy.tools` into the policy's read paths,
/// hidden paths and environment, below `home`. The list is emptied: after
/// this the policy says concretely what is shown, and preparing it again
/// (a nested run of the broker) adds nothing twice.
pub fn expose(policy: &mut Policy, home: Option<&Path>) -> Result<(), ToolError> {
    let names = std::mem::take(&mut policy.tools);
    let mut shown = Overrides::default();
    let mut path_dirs: Vec<PathBuf> = Vec::new();
    for name in &names {
        let tool = find(name).ok_or_else(|| ToolError::Unknown(name.clone()))?;
        let home = home.ok_or_else(|| ToolError::NoHome(name.clone()))?;
        let dirs: Vec<PathBuf> = tool.read.iter().filter_map(|r| real(home, r)).collect();
        if dirs.is_empty() {
            return Err(ToolError::Missing {
                name: name.clone(),
                looked: tool
                    .read
                    .iter()
                    .map(|r| format!("~/{r}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                home: home.to_path_buf(),
            });
        }
        for dir in dirs {
            if !shown.read.contains(&dir) {
                shown.read.push(dir);
            }
        }
        for (var, relative) in tool.env {
            let value = real(home, relative).unwrap_or_else(|| home.join(relative));
            shown
                .env
                .insert((*var).to_string(), value.to_string_lossy().into_owned());
        }
        path_dirs.extend(tool.path.iter().filter_map(|p| real(home, p)));
        if tool.name == "node" {
            for version in node_bins(home) {
                if let Some(bin) = real(&version, "bin") {
                    path_dirs.push(bin);
                }
                if let Ok(npmrc) = std::fs::canonicalize(version.join("etc/npmrc")) {
                    shown.hide.push(npmrc);
                }
            }
        }
    }
    if !path_dirs.is_empty() {
        let path = search_path(policy, path_dirs);
        shown.env.insert("PATH".into(), path);
    }
    shown.apply(policy)?;
    Ok(())
}

/// The toolchains' directories before the profile's PATH (its `set`, the
/// caller's own when the profile passes it, else the usual default).
fn search_path(policy: &Policy, path_dirs: Vec<PathBuf>) -> String {
    let current = policy
        .env
        .set
        .get("PATH")
        .cloned()
        .or_else(|| {
            policy
                .env
                .pass
                .iter()
                .any(|p| p == "PATH")
                .then(|| std::env::var("PATH").ok())
                .flatten()
        })
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut entries: Vec<String> = Vec::new();
    for dir in path_dirs {
        let dir = dir.to_string_lossy().into_owned();
        if !entries.contains(&dir) && !current.split(':').any(|e| e == dir) {
            entries.push(dir);
        }
    }
    entries.push(current);
    entries.join(":")
}

/// The tool whose directories hold `path` (a program found on the host),
/// for the message when a command is not found inside.
pub fn tool_holding(path: &Path, home: &Path) -> Option<&'static str> {
    TOOLS
        .iter()
        .find(|tool| {
            tool.read.iter().any(|r| {
                real(home, r).is_some_and(|dir| path.starts_with(dir))
                    || path.starts_with(home.join(r))
            })
        })
        .map(|tool| tool.name)
}

/// The directories a tool's programs live in, below `home`, where they
/// exist: where a command not found inside is looked for on the host.
pub fn program_dirs(home: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = TOOLS
        .iter()
        .flat_map(|t| t.path.iter())
        .filter_map(|p| real(home, p))
        .collect();
    dirs.extend(node_bins(home).iter().filter_map(|v| real(v, "bin")));
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict() -> Policy {
        crate::profile::load("strict").unwrap()
    }

    #[test]
    fn rust_shows_its_directories_read_only_and_never_cargo_itself() {
        let home = tempfile::tempdir().unwrap();
        for dir in [".cargo/bin", ".cargo/registry", ".cargo/git", ".rustup"] {
            std::fs::create_dir_all(home.path().join(dir)).unwrap();
        }
        std::fs::write(home.path().join(".cargo/credentials.toml"), "token").unwrap();
        let home = std::fs::canonicalize(home.path()).unwrap();
        let mut policy = strict();
        policy.tools = vec!["rust".into()];
        expose(&mut policy, Some(&home)).unwrap();
        let read = &policy.filesystem.read;
        assert!(read.contains(&home.join(".rustup")));
        assert!(read.contains(&home.join(".cargo/bin")));
        assert!(!read.iter().any(|p| p == &home.join(".cargo")));
        assert!(!read.iter().any(|p| p.starts_with(home.join(".cargo/git"))));
        assert!(!policy.filesystem.write.iter().any(|p| p.starts_with(&home)));
        let path = &policy.env.set["PATH"];
        assert!(path.starts_with(&format!("{}:", home.join(".cargo/bin").display())));
        assert_eq!(
            policy.env.set["CARGO_HOME"],
            home.join(".cargo").display().to_string()
        );
        assert!(policy.tools.is_empty(), "exposed once");
        // A second pass adds nothing.
        let before = policy.clone();
        expose(&mut policy, Some(&home)).unwrap();
        assert_eq!(policy, before);
    }

    #[test]
    fn node_hides_the_npmrc_of_each_installed_node() {
        let home = tempfile::tempdir().unwrap();
        for v in ["v18.2.0", "v20.11.1", "v9.0.0"] {
            std::fs::create_dir_all(home.path().join(".nvm/versions/node").join(v).join("bin"))
                .unwrap();
        }
        let etc = home.path().join(".nvm/versions/node/v20.11.1/etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("npmrc"), "//registry.npmjs.org/:_authToken=x").unwrap();
        let home = std::fs::canonicalize(home.path()).unwrap();
        let mut policy = strict();
        policy.tools = vec!["node".into()];
        expose(&mut policy, Some(&home)).unwrap();
        let npmrc = etc.join("npmrc").canonicalize().unwrap();
        assert!(policy.filesystem.hide.contains(&npmrc));
        let path = &policy.env.set["PATH"];
        let first = path.split(':').next().unwrap();
        assert!(first.ends_with("v20.11.1/bin"), "{path}");
    }

    #[test]
    fn unknown_and_missing_tools_say_what_exists() {
        let home = tempfile::tempdir().unwrap();
        let mut policy = strict();
        policy.tools = vec!["cobol".into()];
        let err = expose(&mut policy, Some(home.path())).unwrap_err();
        assert!(err.to_string().contains("rust, node, python"), "{err}");
        policy.tools = vec!["python".into()];
        let err = expose(&mut policy, Some(home.path())).unwrap_err();
        assert!(err.to_string().contains("~/.pyenv"), "{err}");
    }
}
