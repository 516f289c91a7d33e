//! Warnings for a profile that is valid but almost certainly not meant.
//!
//! A list key replaces the list it inherits, so `extends = "strict"` with
//! `read_if_exists = ["/etc/resolv.conf"]` drops strict's `/lib64` and
//! `/lib`: the profile checks, and then every run fails to execute its
//! program because the dynamic loader is gone. The run's error can only say
//! "cannot execute"; the profile is where the cause is, so `sandbox profile
//! check` names it there, with the `_add` form that keeps the inherited list.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::policy::Policy;

/// A `filesystem.read` or `read_if_exists` that a profile in the chain wrote
/// as a replacement (`KEY = [...]`), with the list it replaced.
#[derive(Debug)]
pub(crate) struct Replaced {
    /// The profile that wrote it.
    pub origin: String,
    /// `filesystem.read` or `filesystem.read_if_exists`.
    pub key: &'static str,
    /// The list before this profile.
    pub inherited: Vec<PathBuf>,
    /// The list this profile wrote.
    pub written: Vec<PathBuf>,
}

/// Programs read for the dynamic loader they name; the first that exists wins.
const LOADER_WITNESSES: [&str; 3] = ["/usr/bin/env", "/bin/sh", "/usr/bin/python3"];

/// Bytes of a program read to find its loader: program headers sit right
/// after the ELF header in every linker's output.
const ELF_HEAD: u64 = 64 * 1024;

/// What a run needs visible to start an interpreter, and why.
fn startup_paths() -> Vec<(PathBuf, &'static str)> {
    let mut paths = vec![(
        PathBuf::from("/usr/bin"),
        "where python3, sh and the other interpreters are",
    )];
    if let Some(loader) = LOADER_WITNESSES
        .iter()
        .find_map(|program| program_interpreter(Path::new(program)))
    {
        paths.push((
            loader,
            "the dynamic loader every dynamically linked program starts with",
        ));
    }
    paths
}

/// The host paths a profile shows the run.
fn visible(policy: &Policy) -> Vec<PathBuf> {
    let fs = &policy.filesystem;
    fs.read
        .iter()
        .chain(&fs.read_if_exists)
        .chain(&fs.write)
        .cloned()
        .collect()
}

/// The dynamic loader of `program` when `policy` does not show it: why a
/// program the run can see still fails to execute with `ENOENT`.
pub fn hidden_loader(policy: &Policy, program: &Path) -> Option<PathBuf> {
    let loader = program_interpreter(program)?;
    let shown = visible(policy);
    spellings(&loader)
        .iter()
        .any(|form| !covers(&shown, form))
        .then_some(loader)
}

/// One warning per replaced list whose replacement drops a path a run needs
/// to start a program, when nothing else in the profile shows that path.
pub(crate) fn startup_lists_replaced(policy: &Policy, replaced: &[Replaced]) -> Vec<String> {
    let visible = visible(policy);
    let needed = startup_paths();
    let mut warnings = Vec::new();
    for replacement in replaced {
        let lost: Vec<String> = needed
            .iter()
            .filter(|(path, _)| {
                spellings(path).iter().any(|form| {
                    !covers(&visible, form)
                        && covers(&replacement.inherited, form)
                        && !covers(&replacement.written, form)
                })
            })
            .map(|(path, why)| format!("{} ({why})", path.display()))
            .collect();
        if lost.is_empty() {
            continue;
        }
        warnings.push(message(replacement, &lost));
    }
    warnings
}

fn message(replacement: &Replaced, lost: &[String]) -> String {
    let short_key = replacement
        .key
        .rsplit('.')
        .next()
        .unwrap_or(replacement.key);
    let added: Vec<String> = replacement
        .written
        .iter()
        .filter(|path| !replacement.inherited.contains(path))
        .map(|path| format!("{:?}", path.display().to_string()))
        .collect();
    let fix = if added.is_empty() {
        format!(
            "name only what to drop with `{short_key}_remove = [...]` instead of replacing the list"
        )
    } else {
        format!(
            "write `{short_key}_add = [{}]` instead, which adds to the inherited list",
            added.join(", ")
        )
    };
    format!(
        "{}: `{}` replaces the list it inherits, and the profile no longer shows {}: \
         every run will fail with \"cannot execute\" (no `--tool` fixes that); {fix}",
        replacement.origin,
        replacement.key,
        lost.join(" or "),
    )
}

/// The path as written and, when a symlink leads elsewhere, where it leads:
/// both must be visible for the sandbox to open it.
fn spellings(path: &Path) -> Vec<PathBuf> {
    let mut forms = vec![path.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(path) {
        if real != path {
            forms.push(real);
        }
    }
    forms
}

/// Whether `path` is one of `list` or under one of them.
fn covers(list: &[PathBuf], path: &Path) -> bool {
    list.iter().any(|entry| path.starts_with(entry))
}

/// The `PT_INTERP` of an ELF program: the dynamic loader the kernel starts
/// it with. `None` for a static program, a script or anything unreadable.
fn program_interpreter(program: &Path) -> Option<PathBuf> {
    const PT_INTERP: u64 = 3;
    let mut head = Vec::new();
    std::fs::File::open(program)
        .ok()?
        .take(ELF_HEAD)
        .read_to_end(&mut head)
        .ok()?;
    if head.get(..4)? != b"\x7fELF" {
        return None;
    }
    let wide = match head.get(4)? {
        1 => false,
        2 => true,
        _ => return None,
    };
    let little_endian = match head.get(5)? {
        1 => true,
        2 => false,
        _ => return None,
    };
    let number = |at: u64, size: usize| -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        let bytes = head.get(at..at.checked_add(size)?)?;
        let mut value = 0u64;
        for (i, byte) in bytes.iter().enumerate() {
            let position = if little_endian { i } else { size - 1 - i };
            value |= u64::from(*byte) << (8 * position);
        }
        Some(value)
    };
    // Offsets of e_phoff, e_phentsize, e_phnum and, in a program header,
    // of p_offset and p_filesz, for ELF32 and ELF64.
    let (phoff, phentsize, phnum) = if wide {
        (number(32, 8)?, number(54, 2)?, number(56, 2)?)
    } else {
        (number(28, 4)?, number(42, 2)?, number(44, 2)?)
    };
    for index in 0..phnum {
        let header = phoff.checked_add(index.checked_mul(phentsize)?)?;
        if number(header, 4)? != PT_INTERP {
            continue;
        }
        let (offset, size) = if wide {
            (number(header + 8, 8)?, number(header + 32, 8)?)
        } else {
            (number(header + 4, 4)?, number(header + 16, 4)?)
        };
        let start = usize::try_from(offset).ok()?;
        let bytes = head.get(start..start.checked_add(usize::try_from(size).ok()?)?)?;
        let name = bytes.split(|b| *b == 0).next()?;
        let path = PathBuf::from(OsStr::from_bytes(name));
        return path.is_absolute().then_some(path);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::{checked, Unit};
    use super::*;

    fn warnings(text: &str) -> Vec<String> {
        match checked(Unit::file(PathBuf::from("p.toml"), text.to_owned())) {
            Ok(checked) => checked.warnings,
            Err(err) => panic!("{err}"),
        }
    }

    #[test]
    fn the_loader_of_a_system_program_is_found() {
        let loader = LOADER_WITNESSES
            .iter()
            .find_map(|program| program_interpreter(Path::new(program)))
            .expect("a dynamically linked /usr/bin/env or /bin/sh");
        assert!(loader.exists(), "{}", loader.display());
        assert_eq!(program_interpreter(Path::new("/etc/hostname")), None);
        assert_eq!(program_interpreter(Path::new("/nonexistent")), None);
    }

    #[test]
    fn replacing_read_if_exists_over_strict_warns_and_names_the_add_form() {
        let found = warnings(
            "version = 1\nextends = \"strict\"\n[filesystem]\nread_if_exists = [\"/etc/resolv.conf\"]\n",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("p.toml: `filesystem.read_if_exists` replaces"),
            "{found:?}"
        );
        assert!(
            found[0].contains("read_if_exists_add = [\"/etc/resolv.conf\"]"),
            "{found:?}"
        );
        assert!(found[0].contains("dynamic loader"), "{found:?}");
    }

    #[test]
    fn replacing_read_without_usr_warns_and_an_empty_list_suggests_remove() {
        let found = warnings("version = 1\n[filesystem]\nread = []\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("/usr/bin ("), "{found:?}");
        assert!(found[0].contains("read_remove"), "{found:?}");
    }

    #[test]
    fn edits_and_replacements_that_keep_the_loader_are_quiet() {
        for text in [
            "version = 1\nextends = \"strict\"\n[filesystem]\nread_if_exists_add = [\"/etc/resolv.conf\"]\n",
            "version = 1\nextends = \"standard\"\n",
            "version = 1\nextends = \"permissive\"\n",
            "version = 1\n[filesystem]\nread = [\"/usr\", \"/opt\"]\nread_if_exists = [\"/lib\", \"/lib64\", \"/lib32\", \"/bin\"]\n",
        ] {
            assert_eq!(warnings(text), Vec::<String>::new(), "{text}");
        }
    }
}
