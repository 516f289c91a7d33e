#![allow(dead_code)]
//! TEMPORARY placeholder for the shell tool (helper "shell" writes the real
//! module); it refuses every command so nothing runs unsandboxed.
use serde_json::{json, Map, Value};
use std::path::PathBuf;

/// How commands run.
#[derive(Debug, Clone)]
pub struct ShellConfig {
    program: PathBuf,
    profile_spec: String,
    project: PathBuf,
}
impl ShellConfig {
    /// Placeholder.
    pub fn new(program: PathBuf, profile_spec: String, project: PathBuf) -> ShellConfig {
        ShellConfig {
            program,
            profile_spec,
            project,
        }
    }
}
/// Placeholder.
#[derive(Debug)]
pub struct ShellRequest;
/// Placeholder.
#[derive(Debug, thiserror::Error)]
#[error("the shell tool is not built yet")]
pub struct ShellError;
impl ShellRequest {
    /// Placeholder.
    pub fn from_arguments(_: &Map<String, Value>) -> Result<ShellRequest, ShellError> {
        Err(ShellError)
    }
}
/// Placeholder.
pub struct ShellOutcome;
impl ShellOutcome {
    /// Placeholder.
    pub fn text(&self) -> String {
        String::new()
    }
    /// Placeholder.
    pub fn structured(&self) -> Value {
        json!({})
    }
    /// Placeholder.
    pub fn is_error(&self) -> bool {
        true
    }
}
/// Placeholder.
pub async fn run(_: &ShellConfig, _: &ShellRequest) -> Result<ShellOutcome, ShellError> {
    Err(ShellError)
}
/// Placeholder.
pub fn description(_: &crate::Policy) -> String {
    String::new()
}
/// Placeholder.
pub fn input_schema() -> Value {
    json!({"type": "object"})
}
/// Placeholder.
pub fn output_schema() -> Value {
    json!({"type": "object"})
}
