//! A call's arguments, checked against what the server allows.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{ShellConfig, ShellError};

/// One validated call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellRequest {
    /// The command line, run by `/bin/sh -c`.
    pub command: String,
    /// The timeout asked for (None: the default).
    pub timeout: Option<Duration>,
    /// Keep the run's changes for review (`sandbox run --review`); the
    /// server's profile may turn review on for every call too.
    pub review: bool,
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl ShellRequest {
    /// Validate a call's arguments against what `config` allows.
    pub fn from_arguments(
        arguments: &Map<String, Value>,
        config: &ShellConfig,
    ) -> Result<ShellRequest, ShellError> {
        if let Some(name) = arguments
            .keys()
            .find(|name| !matches!(name.as_str(), "command" | "timeout_ms" | "review"))
        {
            return Err(ShellError::UnknownArgument { name: name.clone() });
        }
        let command = match arguments.get("command") {
            None => return Err(ShellError::MissingCommand),
            Some(Value::String(command)) => command,
            Some(other) => {
                return Err(ShellError::CommandNotString {
                    found: json_type(other),
                })
            }
        };
        if command.trim().is_empty() {
            return Err(ShellError::EmptyCommand);
        }
        if command.contains('\0') {
            return Err(ShellError::CommandHasNul);
        }
        let max_ms = millis(config.timeout_ceiling());
        let timeout = match arguments.get("timeout_ms") {
            None | Some(Value::Null) => None,
            Some(value) => {
                let given = value
                    .as_u64()
                    .ok_or_else(|| ShellError::TimeoutNotInteger {
                        found: value.to_string(),
                        max_ms,
                    })?;
                if given == 0 || given > max_ms {
                    return Err(ShellError::TimeoutOutOfRange {
                        given,
                        max_ms,
                        default_ms: millis(config.effective_default_timeout()),
                    });
                }
                Some(Duration::from_millis(given))
            }
        };
        let review = match arguments.get("review") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(review)) => *review,
            Some(other) => {
                return Err(ShellError::ReviewNotBoolean {
                    found: json_type(other),
                })
            }
        };
        Ok(ShellRequest {
            command: command.clone(),
            timeout,
            review,
        })
    }
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
