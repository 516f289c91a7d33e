//! Skills as MCP tools: the listing (descriptions that say what the
//! sandbox lets each skill do, annotations derived from its declared
//! permissions) and the shape of a call's result.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Map, Value};

use sandbox::broker::prompt;

/// What the person's profile lets any skill do, said once for every tool.
#[derive(Debug, Clone)]
pub struct SandboxSummary {
    /// The profile's name.
    pub profile: String,
    /// The project root, the one writable directory.
    pub project: String,
    /// The network the sandbox gets (`none`, `loopback`, `host`).
    pub network: String,
}

impl SandboxSummary {
    /// The summary of `profile` for runs in `project`.
    pub fn of(profile: &sandbox::Policy, project: &std::path::Path) -> SandboxSummary {
        SandboxSummary {
            profile: profile.name.clone(),
            project: project.display().to_string(),
            network: profile.network.mode.name().to_string(),
        }
    }

    fn network_sentence(&self) -> &'static str {
        match self.network.as_str() {
            "none" => "no network",
            "loopback" => "only its own loopback network",
            "allowlist" => "a proxy to the hosts its profile lists",
            _ => "the host's network",
        }
    }
}

/// Actions that change files or run programs (a skill declaring none of
/// them is read-only).
const WRITING: [&str; 4] = ["fs.write", "fs.mkdir", "fs.delete", "terminal.run"];
/// Actions that can destroy what exists.
const DESTRUCTIVE: [&str; 2] = ["fs.delete", "terminal.run"];
/// Actions that reach beyond the machine.
const OPEN_WORLD: [&str; 1] = ["net.http"];

fn declares(permissions: &[String], actions: &[&str]) -> bool {
    permissions.iter().any(|p| {
        let action = p.split(':').next().unwrap_or(p);
        actions.contains(&action)
    })
}

/// The MCP tool for one entry of serve's `skill.list`, or None for a
/// template (text for a model, never run). A skill the profile refuses or
/// that is disabled stays listed, its description saying why, so that the
/// agent and the person see the reason instead of a missing tool.
pub fn tool_of(entry: &Value, summary: &SandboxSummary) -> Option<Value> {
    let name = entry["name"].as_str()?;
    if entry["executionMode"] == "template" {
        return None;
    }
    let permissions: Vec<String> = entry["permissions"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let declared = if permissions.is_empty() {
        "it declared no broker actions, so it can ask for none".to_string()
    } else {
        format!(
            "through the broker it may ask for {} (each allowed, asked or denied by the profile)",
            permissions.join(", ")
        )
    };
    // The sandbox's words first and the skill's own after, marked as its:
    // a project skill's description comes from whoever wrote the project.
    let description = format!(
        "Runs sandboxed (profile {}): the project {} is its working directory and the only \
         place it can write; it sees no home directory or host secrets, has {}, and {declared}.\n\n\
         The skill's own description: {}",
        summary.profile,
        summary.project,
        summary.network_sentence(),
        // Serve escapes it when the manifest loads; escaping is idempotent,
        // and this face shows nothing it has not escaped itself.
        prompt::escape(entry["description"].as_str().unwrap_or_default()),
    );
    let mut description = description;
    if entry["state"] == "failed" || entry["state"] == "disabled" {
        if let Some(error) = entry["error"].as_str() {
            let error = prompt::escape(error);
            description.push_str(&format!("\n\nCurrently unavailable: {error}"));
        }
    }
    let read_only = !declares(&permissions, &WRITING);
    let mut annotations = json!({
        "title": name,
        "readOnlyHint": read_only,
        "openWorldHint": declares(&permissions, &OPEN_WORLD) || summary.network == "host",
    });
    if !read_only {
        annotations["destructiveHint"] = json!(declares(&permissions, &DESTRUCTIVE));
    }
    let mut tool = json!({
        "name": name,
        "title": name,
        "description": description,
        "inputSchema": input_schema(&entry["inputSchema"]),
        "annotations": annotations,
    });
    if let Some(output) = entry.get("outputSchema").filter(|s| s.is_object()) {
        tool["outputSchema"] = output.clone();
    }
    Some(tool)
}

/// MCP wants an object schema; a manifest without one takes any object.
fn input_schema(declared: &Value) -> Value {
    match declared {
        Value::Object(schema) if schema.get("type").is_none_or(|t| t == "object") => {
            let mut schema = schema.clone();
            schema.insert("type".into(), json!("object"));
            Value::Object(schema)
        }
        _ => json!({"type": "object"}),
    }
}

/// A successful call: the skill's result as structured content (an object
/// as it is, anything else under `result`) and as text for clients that
/// read only text.
pub fn success(result: Value) -> CallToolResult {
    let text = match &result {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let structured = match result {
        Value::Object(map) => Value::Object(map),
        other => {
            let mut map = Map::new();
            map.insert("result".into(), other);
            Value::Object(map)
        }
    };
    with_structured(
        CallToolResult::success(vec![ContentBlock::text(text)]),
        structured,
    )
}

/// A failed call, as a tool result the agent reads (not a protocol error:
/// hosts show those as an opaque failure).
pub fn failure(message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// `result` with `structured` as its structured content.
pub fn with_structured(mut result: CallToolResult, structured: Value) -> CallToolResult {
    result.structured_content = Some(structured);
    result
}

/// The message for an error object of serve's `skill.invoke`, saying what
/// to do about it where the code says.
pub fn failure_message(name: &str, error: &Value) -> String {
    use sandbox::broker::protocol::code;
    let message = error["message"].as_str().unwrap_or("the skill failed");
    let hint = match error["code"].as_i64() {
        Some(code::INVALID_PARAMS) => " (fix the arguments to match the tool's inputSchema)",
        Some(code::SKILL_DISABLED) => " (change the skill's files to enable it again)",
        Some(code::TIMEOUT) => " (the skill's manifest sets its timeout)",
        _ => "",
    };
    if message.starts_with("skill ") {
        format!("{message}{hint}")
    } else {
        format!("skill {name}: {message}{hint}")
    }
}

/// An `elicitation/create` request asking the person for one `decision`
/// among `choices`, with `message` shown as it is.
pub fn choice_question(message: &str, title: &str, choices: &[&str]) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "decision": {
                        "type": "string",
                        "title": title,
                        "enum": choices,
                    }
                },
                "required": ["decision"],
            },
        },
    })
}
