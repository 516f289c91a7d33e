//! Skills: directories with a `SKILL.md` manifest. This module so far holds
//! the manifest and discovery; running skills comes next.
pub mod manifest;
