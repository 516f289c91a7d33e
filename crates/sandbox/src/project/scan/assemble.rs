//! From what each directory holds to what the run's view needs: secrets'
//! other names and symlinks' targets, hard links out of the project,
//! pins, and the limits on all of it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::walker::DirFacts;
use super::{Found, Identity, Listing, Scan, ScanError, MAX_SCAN_MOUNTS};
use crate::project::HardlinkPolicy;

/// What the view of the project at `root` needs, from every directory a
/// walk reached (`dirs`, by path below the root).
pub(super) fn assemble(
    root: &Path,
    writable: bool,
    hardlinks: HardlinkPolicy,
    dirs: &HashMap<PathBuf, DirFacts>,
    listing: Listing,
) -> Result<Scan, ScanError> {
    let mut scan = Scan::default();
    // Regular files with more than one link: identity -> (links, paths here).
    let mut linked: HashMap<Identity, (u64, Vec<PathBuf>)> = HashMap::new();
    let mut secret_inodes = HashSet::new();
    let mut secret_links = Vec::new();
    for (path, facts) in dirs {
        scan.entries += facts.entries;
        scan.secrets.extend(facts.secrets.iter().cloned());
        scan.protected.extend(facts.protected.iter().cloned());
        scan.protected_links
            .extend(facts.protected_links.iter().cloned());
        scan.protected_before
            .extend(facts.protected_before.iter().cloned());
        for (identity, links, path) in &facts.linked {
            let entry = linked.entry(*identity).or_insert((*links, Vec::new()));
            // Directories walked at different times may have seen different
            // counts (each was walked again after its watch saw the change):
            // the highest is the one that covers.
            entry.0 = entry.0.max(*links);
            entry.1.push(path.clone());
        }
        secret_inodes.extend(facts.secret_inodes.iter().copied());
        secret_links.extend(facts.secret_links.iter().cloned());
        if let Some(listed) = facts.listed.as_ref().filter(|_| listing == Listing::Kept) {
            scan.listed_dirs.insert(path.clone(), listed.clone());
        }
    }
    for link in secret_links {
        if let Some(target) = link_target(root, &link) {
            if !scan.secrets.contains(&target) {
                scan.secrets.push(target);
            }
        }
    }
    // A protected name that is a symlink cannot be mounted over; what it
    // leads to is what the host reads, so that is made read-only.
    scan.protected_links.sort();
    for link in scan.protected_links.clone() {
        if let Some(target) = link_target(root, &link) {
            if !scan.protected.contains(&target) {
                scan.protected.push(target);
            }
        }
    }
    let mut outside = Vec::new();
    let protected: HashSet<&Path> = scan.protected.iter().map(|f| f.path.as_path()).collect();
    let secrets: HashSet<PathBuf> = scan.secrets.iter().map(|f| f.path.clone()).collect();
    let mut other_names = Vec::new();
    for (identity, (links, paths)) in &linked {
        if secret_inodes.contains(identity) {
            // Another name of a secret file shows the same content.
            other_names.extend(
                paths
                    .iter()
                    .filter(|path| !secrets.contains(*path))
                    .map(|path| Found {
                        path: path.clone(),
                        is_dir: false,
                    }),
            );
            continue;
        }
        let found = paths.len() as u64;
        if found < *links && writable && hardlinks != HardlinkPolicy::Allow {
            outside.extend(
                paths
                    .iter()
                    .filter(|p| {
                        !protected.contains(p.as_path())
                            && !p.ancestors().any(|a| protected.contains(a))
                    })
                    .cloned(),
            );
        }
    }
    scan.secrets.extend(other_names);
    outside.sort();
    if !outside.is_empty()
        && (hardlinks == HardlinkPolicy::Refuse || outside.len() > MAX_SCAN_MOUNTS)
    {
        return Err(outside_links_error(&outside));
    }
    scan.outside_links = outside;

    let mut pins = BTreeSet::new();
    for found in &scan.protected {
        for ancestor in found.path.ancestors().skip(1) {
            if !ancestor.as_os_str().is_empty() {
                pins.insert(ancestor.to_path_buf());
            }
        }
    }
    scan.pins = pins.into_iter().collect();
    // Nothing below a hidden directory is in the view, and a mount there
    // would find no mount point: a symlink's target can be anywhere.
    let hidden_dirs: Vec<PathBuf> = scan
        .secrets
        .iter()
        .filter(|f| f.is_dir)
        .map(|f| f.path.clone())
        .collect();
    let below_hidden = |p: &Path| {
        hidden_dirs
            .iter()
            .any(|d| p != d.as_path() && p.starts_with(d))
    };
    scan.secrets.retain(|f| !below_hidden(&f.path));
    scan.protected.retain(|f| !below_hidden(&f.path));
    scan.pins.retain(|p| !below_hidden(p));
    scan.outside_links.retain(|p| !below_hidden(p));
    scan.secrets.sort();
    scan.secrets.dedup();
    scan.protected.sort();
    let needed = scan.mounts();
    if needed > MAX_SCAN_MOUNTS {
        return Err(ScanError::TooManyMounts {
            needed,
            secrets: scan.secrets.len(),
            protected: scan.protected.len(),
            pins: scan.pins.len(),
            links: scan.outside_links.len(),
        });
    }
    Ok(scan)
}

/// Where a symlink in the project leads, as a path below the project root;
/// None when it leads nowhere or out of the project (not in the view), or
/// to the root itself.
fn link_target(root: &Path, link: &Path) -> Option<Found> {
    let real = std::fs::canonicalize(root.join(link)).ok()?;
    let relative = real.strip_prefix(root).ok()?;
    if relative.as_os_str().is_empty() {
        return None;
    }
    Some(Found {
        path: relative.to_path_buf(),
        is_dir: real.is_dir(),
    })
}

fn outside_links_error(paths: &[PathBuf]) -> ScanError {
    const SHOWN: usize = 5;
    let examples = paths
        .iter()
        .take(SHOWN)
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    ScanError::OutsideLinks {
        count: paths.len(),
        examples,
        more: if paths.len() > SHOWN { ", ..." } else { "" },
    }
}
