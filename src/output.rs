//! Where a command's result goes: a file the person names (created or
//! replaced, never through a link) or stdout. Shared by the commands that
//! write a document (`attest`, and its daemon client).

use std::path::Path;

use anyhow::Context;

/// `bytes` to FILE (a new or replaced regular file, never through a
/// link), or stdout.
pub(crate) fn write_bytes(out: Option<&Path>, bytes: &[u8]) -> anyhow::Result<()> {
    match out {
        Some(path) => {
            let target = sandbox::safe_file::OutputTarget::prepare(path, &[])
                .with_context(|| format!("the output file {}", path.display()))?;
            target
                .write_all(bytes)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        None => {
            use std::io::Write;
            std::io::stdout().write_all(bytes)?;
        }
    }
    Ok(())
}
