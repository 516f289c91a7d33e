//! What a schema may show an agent host: bounded in size and depth, and
//! no key or string that hides what it says.

use serde_json::Value;

use super::compile::{push_pointer, schema_error};
use super::SchemaError;
use crate::broker::prompt;

/// Largest schema (input or output, as compact JSON) a skill may list: an
/// agent host puts every tool's schemas in its model's context, so one
/// project skill must not fill it. Ten times the largest schema of the
/// skills shipped with `sandbox`.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// Deepest nesting of objects and arrays in a schema: deep enough for any
/// real parameter shape, shallow enough that no host's recursive parser or
/// renderer runs out of stack on it.
pub const MAX_SHOWN_DEPTH: usize = 32;

/// Refuse a schema the sandbox would pass on to an agent host (MCP's
/// `inputSchema` and `outputSchema`, serve's `skill.list`) unless it is
/// bounded and shows what it says: at most [`MAX_SCHEMA_BYTES`] and
/// [`MAX_SHOWN_DEPTH`] levels, and no key or string holding a control,
/// bidi or invisible character (a tab or newline excepted). Refused, not
/// escaped or cut: changing a `pattern` or an `enum` value would change
/// what the schema accepts, and a cut schema is no schema.
pub fn check_shown(schema: &Value) -> Result<(), SchemaError> {
    let size = serde_json::to_vec(schema).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_SCHEMA_BYTES {
        return Err(schema_error(
            "",
            format!(
                "the schema is {size} bytes as JSON, more than the {MAX_SCHEMA_BYTES} a skill \
                 may show an agent host: describe the parameters more briefly"
            ),
        ));
    }
    let hidden = |text: &str| {
        text.chars()
            .any(|c| c != '\n' && c != '\t' && crate::broker::text::must_escape(c))
    };
    let refuse_hidden = |location: &str, what: &str, text: &str| {
        schema_error(
            location,
            format!(
                "{what} {} holds a control, bidi or invisible character, which would show an \
                 agent host something else than it says: write it in plain text",
                prompt::shorten(&prompt::escape(text), 80)
            ),
        )
    };
    // Iterative, so that no schema can exhaust this stack either.
    let mut pending = vec![(schema, String::new(), 1)];
    while let Some((value, location, depth)) = pending.pop() {
        match value {
            Value::String(text) if hidden(text) => {
                return Err(refuse_hidden(&location, "the string", text));
            }
            Value::Array(_) | Value::Object(_) if depth > MAX_SHOWN_DEPTH => {
                return Err(schema_error(
                    &location,
                    format!(
                        "the schema nests deeper than {MAX_SHOWN_DEPTH} levels of objects and \
                         arrays: flatten the parameters"
                    ),
                ));
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    let mut pointer = location.clone();
                    push_pointer(&mut pointer, &index.to_string());
                    pending.push((item, pointer, depth + 1));
                }
            }
            Value::Object(members) => {
                for (key, member) in members {
                    if hidden(key) {
                        return Err(refuse_hidden(&location, "the key", key));
                    }
                    let mut pointer = location.clone();
                    push_pointer(&mut pointer, key);
                    pending.push((member, pointer, depth + 1));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
