//! Profiles: TOML files (built in and user-written) parsed into a [`policy::Policy`].
pub mod policy;
