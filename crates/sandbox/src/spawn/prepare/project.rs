//! The project root a run is given: canonical, a directory, and refused
//! where it would expose too much (a home directory the caller did not
//! name, the host's root or its kernel filesystems).

use std::path::{Path, PathBuf};

use super::SpawnSpec;
use crate::profile::policy::{Policy, ProjectAccess};
use crate::spawn::SpawnError;

/// The canonical project root of `spec`, or why it may not be one.
pub(super) fn project_root(policy: &Policy, spec: &SpawnSpec) -> Result<PathBuf, SpawnError> {
    let project = std::fs::canonicalize(&spec.project).map_err(|source| SpawnError::Path {
        what: "project root",
        path: spec.project.clone(),
        source,
    })?;
    if !project.is_dir() {
        return Err(SpawnError::Invalid(format!(
            "project root {} is not a directory",
            project.display()
        )));
    }
    if !spec.project_explicit && policy.filesystem.project != ProjectAccess::Empty {
        let homes = crate::project::home::home_directories();
        if let Some(why) = crate::project::home::too_broad(&project, &homes) {
            return Err(SpawnError::Invalid(format!(
                "refusing to use the current directory {} as the project root: {why}, and the run could {} everything below it. Run from the project's own directory, or pass --project {} if you mean it",
                project.display(),
                if policy.filesystem.project == ProjectAccess::ReadWrite { "change" } else { "read" },
                project.display()
            )));
        }
    }
    for forbidden in ["/", "/proc", "/sys", "/dev"] {
        if project == Path::new(forbidden) || (forbidden != "/" && project.starts_with(forbidden)) {
            return Err(SpawnError::Invalid(format!(
                "the project root cannot be {} (it would expose the host); pass --project with a project directory",
                project.display()
            )));
        }
    }
    Ok(project)
}
