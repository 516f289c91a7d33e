//! JSON-RPC 2.0 over a byte stream, one message per line, with limits that
//! hold against a hostile peer: lines come from [`crate::jsonl::Framer`]
//! (a line longer than the limit is skipped as it streams in), nesting deeper
//! than the limit is rejected before the JSON parser recurses, and every
//! malformed message gets a JSON-RPC error instead of ending the channel.

use serde::Deserialize;
use serde_json::Value;

/// Standard and application error codes.
pub mod code {
    /// Invalid JSON (or not UTF-8).
    pub const PARSE_ERROR: i64 = -32700;
    /// Valid JSON that is not a JSON-RPC request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Wrong parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The broker failed.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// A rule or the caller's declared permissions denied the action.
    pub const PERMISSION_DENIED: i64 = -32001;
    /// The action needs approval and nobody could be asked.
    pub const NEEDS_APPROVAL: i64 = -32002;
    /// The action took too long.
    pub const TIMEOUT: i64 = -32003;
    /// A message or a result is over a size limit.
    pub const TOO_LARGE: i64 = -32004;
    /// The target does not exist.
    pub const NOT_FOUND: i64 = -32005;
    /// Too many requests at once or per second.
    pub const RATE_LIMITED: i64 = -32006;
    /// No skill of that name is loaded.
    pub const NO_SUCH_SKILL: i64 = -32010;
    /// The skill's process ended before answering.
    pub const SKILL_EXITED: i64 = -32011;
    /// The skill crashed too often and is disabled until enabled or changed.
    pub const SKILL_DISABLED: i64 = -32012;
    /// The skill could not be started (its profile, its sandbox, a template).
    pub const SKILL_UNAVAILABLE: i64 = -32013;
    /// The client cancelled the request (LSP's RequestCancelled, which MCP
    /// clients know).
    pub const CANCELLED: i64 = -32800;
}

/// Limits of one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest message in bytes, newline excluded.
    pub max_message: usize,
    /// Deepest nesting of arrays and objects.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message: 1 << 20,
            max_depth: 64,
        }
    }
}

/// A request id: a string, a number or null.
#[derive(Debug, Clone, PartialEq)]
pub enum Id {
    /// A number.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// null (allowed, discouraged).
    Null,
}

impl Id {
    /// The id as JSON.
    pub fn to_value(&self) -> Value {
        match self {
            Id::Number(n) => Value::Number(n.clone()),
            Id::String(s) => Value::String(s.clone()),
            Id::Null => Value::Null,
        }
    }
}

/// A parsed incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// Expects a response.
    Request {
        /// Its id.
        id: Id,
        /// The method.
        method: String,
        /// Parameters (object or array), or null when absent.
        params: Value,
    },
    /// No response.
    Notification {
        /// The method.
        method: String,
        /// Parameters, or null.
        params: Value,
    },
    /// A response to a request the supervisor sent.
    Response {
        /// The id it answers.
        id: Id,
        /// The result, or the error object.
        outcome: Result<Value, Value>,
    },
}

/// Why a line is not a message, with what the error response needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolError {
    /// The JSON-RPC error code.
    pub code: i64,
    /// A precise message.
    pub message: String,
    /// The request id when it could be read, else null.
    pub id: Id,
}

fn error(code: i64, message: impl Into<String>, id: Id) -> ProtocolError {
    ProtocolError {
        code,
        message: message.into(),
        id,
    }
}

/// Nesting depth of arrays and objects, counted outside strings, without
/// recursion; stops counting past `limit`.
pub fn depth_exceeds(line: &[u8], limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in line {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    jsonrpc: String,
    // Absent and null differ (a notification has no id; a request may have
    // a null one), so the raw value is kept and told apart below.
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

/// Deserialize a field that is present (even as null) as `Some`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// An id given as JSON (a string, a number or null); None for anything else.
pub fn parse_id(raw: &Value) -> Option<Id> {
    match raw.clone() {
        Value::Number(n) => Some(Id::Number(n)),
        Value::String(s) => Some(Id::String(s)),
        Value::Null => Some(Id::Null),
        _ => None,
    }
}

/// Parse one line into a message.
pub fn parse(line: &[u8], limits: &Limits) -> Result<Message, ProtocolError> {
    if line.len() > limits.max_message {
        return Err(error(
            code::TOO_LARGE,
            format!("message over {} bytes", limits.max_message),
            Id::Null,
        ));
    }
    let text = std::str::from_utf8(line).map_err(|e| {
        error(
            code::PARSE_ERROR,
            format!("not UTF-8 at byte {}", e.valid_up_to()),
            Id::Null,
        )
    })?;
    if depth_exceeds(line, limits.max_depth) {
        return Err(error(
            code::INVALID_REQUEST,
            format!("nested deeper than {} levels", limits.max_depth),
            Id::Null,
        ));
    }
    // First as a plain value, so that invalid JSON (-32700) and a valid
    // JSON that is no request (-32600) are told apart.
    let value: Value = serde_json::from_str(text)
        .map_err(|e| error(code::PARSE_ERROR, e.to_string(), Id::Null))?;
    if !value.is_object() {
        return Err(error(
            code::INVALID_REQUEST,
            "a message must be a JSON object (batches are not supported)",
            Id::Null,
        ));
    }
    let id_hint = value.get("id").and_then(parse_id);
    let envelope: Envelope = serde_json::from_str(text).map_err(|e| {
        error(
            code::INVALID_REQUEST,
            e.to_string(),
            id_hint.clone().unwrap_or(Id::Null),
        )
    })?;
    if envelope.jsonrpc != "2.0" {
        return Err(error(
            code::INVALID_REQUEST,
            "\"jsonrpc\" must be \"2.0\"",
            id_hint.unwrap_or(Id::Null),
        ));
    }
    let id = match envelope.id {
        None => None,
        Some(raw) => Some(parse_id(&raw).ok_or_else(|| {
            error(
                code::INVALID_REQUEST,
                "\"id\" must be a string, a number or null",
                Id::Null,
            )
        })?),
    };
    match (envelope.method, envelope.result, envelope.error) {
        (Some(method), None, None) => {
            let params = envelope.params.unwrap_or(Value::Null);
            if !(params.is_object() || params.is_array() || params.is_null()) {
                return Err(error(
                    code::INVALID_REQUEST,
                    "\"params\" must be an object or an array",
                    id.unwrap_or(Id::Null),
                ));
            }
            Ok(match id {
                Some(id) => Message::Request { id, method, params },
                None => Message::Notification { method, params },
            })
        }
        (None, Some(result), None) if envelope.params.is_none() => match id {
            Some(id) => Ok(Message::Response {
                id,
                outcome: Ok(result),
            }),
            None => Err(error(
                code::INVALID_REQUEST,
                "a response needs an \"id\"",
                Id::Null,
            )),
        },
        (None, None, Some(err)) if envelope.params.is_none() => match id {
            Some(id) => Ok(Message::Response {
                id,
                outcome: Err(err),
            }),
            None => Err(error(
                code::INVALID_REQUEST,
                "a response needs an \"id\"",
                Id::Null,
            )),
        },
        _ => Err(error(
            code::INVALID_REQUEST,
            "a message has either \"method\" (a request), or \"result\" or \"error\" (a response)",
            id.unwrap_or(Id::Null),
        )),
    }
}

/// A success response line, newline included.
pub fn response(id: &Id, result: &Value) -> Vec<u8> {
    let mut line = serde_json::json!({ "jsonrpc": "2.0", "id": id.to_value(), "result": result })
        .to_string()
        .into_bytes();
    line.push(b'\n');
    line
}

/// An error response line, newline included.
pub fn error_response(id: &Id, code: i64, message: &str, data: Option<&Value>) -> Vec<u8> {
    let mut err = serde_json::json!({ "code": code, "message": message });
    if let Some(data) = data {
        err["data"] = data.clone();
    }
    let mut line = serde_json::json!({ "jsonrpc": "2.0", "id": id.to_value(), "error": err })
        .to_string()
        .into_bytes();
    line.push(b'\n');
    line
}

/// Why a request failed: a JSON-RPC error code, a message, and the rule
/// behind a refusal.
#[derive(Debug)]
pub struct Failure {
    /// JSON-RPC error code.
    pub code: i64,
    /// What went wrong, and the fix where there is one.
    pub message: String,
    /// The rule that refused, when one did.
    pub rule: Option<String>,
}

/// A failure without a rule.
pub fn fail(code: i64, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
        rule: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(line: &[u8]) -> i64 {
        parse(line, &Limits::default()).unwrap_err().code
    }

    #[test]
    fn requests_notifications_and_responses_parse() {
        let limits = Limits::default();
        let m = parse(
            br#"{"jsonrpc":"2.0","id":7,"method":"fs.read","params":{"path":"a"}}"#,
            &limits,
        )
        .unwrap();
        assert!(matches!(m, Message::Request { ref method, .. } if method == "fs.read"));
        let m = parse(
            br#"{"jsonrpc":"2.0","method":"log","params":["hi"]}"#,
            &limits,
        )
        .unwrap();
        assert!(matches!(m, Message::Notification { .. }));
        let m = parse(
            br#"{"jsonrpc":"2.0","id":"x","result":{"ok":true}}"#,
            &limits,
        )
        .unwrap();
        assert!(matches!(m, Message::Response { outcome: Ok(_), .. }));
    }

    #[test]
    fn hostile_input_gets_precise_errors() {
        assert_eq!(code_of(b"{not json"), code::PARSE_ERROR);
        assert_eq!(
            code_of(br#"{"jsonrpc":"2.0","id":1,"method":"fs.re"#),
            code::PARSE_ERROR,
            "truncated"
        );
        assert_eq!(
            code_of(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}"),
            code::PARSE_ERROR,
            "invalid UTF-8"
        );
        assert_eq!(code_of(b"[]"), code::INVALID_REQUEST, "batch");
        assert_eq!(
            code_of(br#"{"jsonrpc":"1.0","id":1,"method":"m"}"#),
            code::INVALID_REQUEST
        );
        assert_eq!(
            code_of(br#"{"jsonrpc":"2.0","id":{},"method":"m"}"#),
            code::INVALID_REQUEST,
            "object id"
        );
        assert_eq!(
            code_of(br#"{"jsonrpc":"2.0","id":1,"method":5}"#),
            code::INVALID_REQUEST,
            "wrong type"
        );
        assert_eq!(
            code_of(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#),
            code::INVALID_REQUEST
        );
        assert_eq!(
            code_of(br#"{"jsonrpc":"2.0","id":1,"method":"m","extra":1}"#),
            code::INVALID_REQUEST,
            "unknown field"
        );
        assert_eq!(
            code_of(br#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#),
            code::INVALID_REQUEST,
            "duplicate"
        );
        let err = parse(
            br#"{"jsonrpc":"2.0","id":9,"method":"m","params":7}"#,
            &Limits::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.id,
            Id::Number(9.into()),
            "the id is kept when it can be read"
        );
    }

    #[test]
    fn a_million_nested_brackets_are_refused_without_recursing() {
        let mut line = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":"#.to_vec();
        line.extend(std::iter::repeat_n(b'[', 1_000_000));
        let err = parse(
            &line,
            &Limits {
                max_message: 2 << 20,
                max_depth: 64,
            },
        )
        .unwrap_err();
        assert_eq!(err.code, code::INVALID_REQUEST);
        assert!(
            err.message.contains("nested deeper than 64"),
            "{}",
            err.message
        );
        // Brackets inside strings do not count.
        let ok = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":["[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["]}"#;
        assert!(parse(ok, &Limits::default()).is_ok());
    }

    #[test]
    fn responses_are_single_lines() {
        let ok = response(
            &Id::String("a\nb".into()),
            &serde_json::json!({"text": "x\ny"}),
        );
        assert_eq!(ok.iter().filter(|b| **b == b'\n').count(), 1);
        assert!(ok.ends_with(b"\n"));
        let err = error_response(
            &Id::Null,
            code::PERMISSION_DENIED,
            "denied by rule fs.write",
            None,
        );
        let v: Value = serde_json::from_slice(&err).unwrap();
        assert_eq!(v["error"]["code"], -32001);
        assert_eq!(v["id"], Value::Null);
    }
}
