//! A review call's change summary: what the run kept, read from the store
//! the supervisor wrote from the run's layer, never from the command's
//! output, which could print a summary of its own. Every path is escaped
//! (controls, bidi overrides, invisible characters) and shortened, since
//! an agent host shows it to a person.

use serde_json::{json, Value};

use sandbox::broker::prompt::{escape, shorten};
use sandbox::review::{ChangeKind, Kept, Store};

/// Paths listed in a summary; the rest are counted.
pub const MOST_LISTED: usize = 100;

/// Characters of a path as shown (its end is kept).
pub const MOST_PATH_CHARS: usize = 160;

/// A path as a person is shown it.
pub fn shown_path(path: &str) -> String {
    shorten(&escape(path), MOST_PATH_CHARS)
}

/// The summary of what `kept` kept, from `store`.
pub fn summary(store: &Store, kept: &Kept) -> Value {
    if let Some(error) = &kept.error {
        return json!({"run": kept.id, "kept": false, "error": escape(error)});
    }
    if kept.changes == 0 && !kept.limit_reached {
        return json!({"run": kept.id, "kept": false, "changes": 0});
    }
    let captured = match store.changes(&kept.id) {
        Ok(captured) => captured,
        Err(err) => {
            return json!({"run": kept.id, "kept": false, "error": escape(&err.to_string())})
        }
    };
    let pending: Vec<_> = captured.changes.iter().filter(|c| !c.applied).collect();
    let count = |kind: ChangeKind| pending.iter().filter(|c| c.kind == kind).count();
    let listed: Vec<Value> = pending
        .iter()
        .take(MOST_LISTED)
        .map(|change| {
            json!({
                "path": shown_path(&change.path),
                "kind": change.kind,
                "headline": escape(&shorten(
                    &sandbox::review::changes::headline(change),
                    MOST_PATH_CHARS + 80
                )),
            })
        })
        .collect();
    json!({
        "run": kept.id,
        "kept": true,
        "changes": pending.len(),
        "added": count(ChangeKind::Added),
        "modified": count(ChangeKind::Modified),
        "deleted": count(ChangeKind::Deleted),
        "limit_reached": captured.limit_reached,
        "listed": listed,
        "not_listed": pending.len().saturating_sub(MOST_LISTED),
        "apply": format!(
            "nothing reached the project yet: the person reviews them with `sandbox changes {}`, applies them with `sandbox apply {}` (all, or the paths named) and drops them with `sandbox discard {}`, in the project",
            kept.id, kept.id, kept.id
        ),
    })
}

/// The summary's line in the text result.
pub fn text_line(summary: &Value) -> String {
    if summary["kept"] != true {
        return format!(
            "review run {}: nothing kept{}",
            summary["run"].as_str().unwrap_or(""),
            summary["error"]
                .as_str()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    let mut out = format!(
        "review run {}: {} change(s) kept ({} added, {} modified, {} deleted){}:\n",
        summary["run"].as_str().unwrap_or(""),
        summary["changes"],
        summary["added"],
        summary["modified"],
        summary["deleted"],
        if summary["limit_reached"] == true {
            ", the run filled its layer so they may be partial"
        } else {
            ""
        }
    );
    for entry in summary["listed"].as_array().into_iter().flatten() {
        out.push_str("  ");
        out.push_str(entry["headline"].as_str().unwrap_or(""));
        out.push('\n');
    }
    if summary["not_listed"].as_u64().is_some_and(|n| n > 0) {
        out.push_str(&format!("  and {} more\n", summary["not_listed"]));
    }
    out.push_str(summary["apply"].as_str().unwrap_or(""));
    out.push('\n');
    out
}

/// A skill's tool result with its review run's `summary`: its line added
/// to the text, and the summary itself under `_meta.review`. The skill's
/// structured content is its own (and its output schema's), so the
/// summary cannot go there as the shell tool's does, nor can the skill's
/// result fake it: it comes from the host, beside the result.
pub fn with_summary(
    mut result: rmcp::model::CallToolResult,
    summary: Value,
) -> rmcp::model::CallToolResult {
    result
        .content
        .push(rmcp::model::ContentBlock::text(text_line(&summary)));
    let mut meta = result.meta.take().unwrap_or_default();
    meta.insert("review".into(), summary);
    result.meta = Some(meta);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_cannot_hide_or_fake_what_it_says() {
        let shown = shown_path("a\u{202e}txt.exe\nM fake.txt\x1b[2J");
        assert!(!shown.contains('\u{202e}'));
        assert!(!shown.contains('\n'));
        assert!(!shown.contains('\x1b'));
        let long = "d/".repeat(1000) + "end.txt";
        let shown = shown_path(&long);
        assert!(shown.chars().count() <= MOST_PATH_CHARS);
        assert!(shown.ends_with("end.txt"));
    }
}
