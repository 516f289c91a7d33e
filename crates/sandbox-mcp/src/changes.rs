//! The review tools beside the shell tool: `apply_changes` puts a review
//! run's kept changes into the project once the person accepts them
//! through elicitation, and `discard_changes` drops them.
//!
//! The agent never decides alone: apply is planned with the host's rules
//! at their defaults (protected entries, CI definitions, set-id files,
//! links out of the project, hard links, secrets' names and conflicts are
//! refused, each named), only a plan with nothing refused is put to the
//! person, and what is written is exactly what they were shown (checked
//! again under the run's lock). No tool call can pass an override: those
//! are `sandbox apply`'s flags, for a person at a terminal. A host that
//! cannot elicit gets a refusal saying so. Only runs of the server's own
//! project are seen.

use std::path::Path;

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Map, Value};

use sandbox::broker::prompt::escape;
use sandbox::review::apply::{self, Allow, Applied, Plan};
use sandbox::review::{ReviewError, Store};

use super::shell::review::{shown_path, MOST_LISTED, MOST_PATH_CHARS};
use super::tools;

/// The apply tool's name.
pub const APPLY_TOOL: &str = "apply_changes";
/// The discard tool's name.
pub const DISCARD_TOOL: &str = "discard_changes";

/// Paths a call may name.
const MOST_PATHS: usize = 1000;
/// Bytes of one named path (PATH_MAX).
const MOST_PATH_BYTES: usize = 4096;

/// What a call of either tool was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangesRequest {
    /// The run id, or `last`.
    pub run: String,
    /// Project paths to apply (all when empty).
    pub paths: Vec<String>,
}

/// Why a call of either tool was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    /// No `run`.
    #[error("missing argument \"run\": give the review run's id from the shell tool's result (review.run) or a skill's (_meta.review.run), or \"last\"")]
    MissingRun,
    /// `run` is not a string.
    #[error("argument \"run\" must be a string (the review run's id, or \"last\")")]
    RunNotString,
    /// `paths` is not a list of strings, or too long.
    #[error("argument \"paths\" must be a list of at most {MOST_PATHS} project paths (strings of at most {MOST_PATH_BYTES} bytes); leave it out to apply every change")]
    BadPaths,
    /// An argument the tool does not take.
    #[error("unknown argument \"{0}\": the tool takes only \"run\"{1}")]
    UnknownArgument(String, &'static str),
    /// The run was kept for another project.
    #[error("run {id} is not a review run of this server's project {project}")]
    OtherProject {
        /// The run.
        id: String,
        /// The server's project.
        project: String,
    },
    /// The store refused.
    #[error(transparent)]
    Review(#[from] ReviewError),
}

impl ChangesRequest {
    /// A call's arguments; `paths` only where `takes_paths`.
    pub fn from_arguments(
        arguments: &Map<String, Value>,
        takes_paths: bool,
    ) -> Result<ChangesRequest, ChangesError> {
        let also = if takes_paths { " and \"paths\"" } else { "" };
        if let Some(name) = arguments
            .keys()
            .find(|k| !(k.as_str() == "run" || (takes_paths && k.as_str() == "paths")))
        {
            return Err(ChangesError::UnknownArgument(escape(name), also));
        }
        let run = match arguments.get("run") {
            None => return Err(ChangesError::MissingRun),
            Some(Value::String(run)) => run.clone(),
            Some(_) => return Err(ChangesError::RunNotString),
        };
        let paths = match arguments.get("paths") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) if list.len() <= MOST_PATHS => list
                .iter()
                .map(|p| match p {
                    Value::String(p) if p.len() <= MOST_PATH_BYTES && !p.contains('\0') => {
                        Ok(p.clone())
                    }
                    _ => Err(ChangesError::BadPaths),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(ChangesError::BadPaths),
        };
        Ok(ChangesRequest { run, paths })
    }

    /// The run's id, resolved (`last`) and checked to be of `project`.
    fn resolve(&self, store: &Store, project: &Path) -> Result<String, ChangesError> {
        let id = store.resolve(&self.run, project)?;
        let started = store.started(&id)?;
        if started.project != project {
            return Err(ChangesError::OtherProject {
                id: escape(&id),
                project: project.display().to_string(),
            });
        }
        Ok(id)
    }
}

/// The `tools/list` entries of both tools.
pub fn tool_entries(project: &Path) -> [Value; 2] {
    let run = json!({
        "type": "string",
        "minLength": 1,
        "description": "The review run's id (the shell tool's result, review.run; a skill's, _meta.review.run), or \"last\" for the newest."
    });
    [
        json!({
            "name": APPLY_TOOL,
            "title": "Apply a review run's changes",
            "description": format!(
                "Apply the changes a shell command or a skill made in review mode to the project {}, after the person accepts them: they are shown the list and asked. Protected entries (git hooks and config, agent settings, .sandbox/, .skills/), CI definitions, set-id files, symlinks out of the project, hard links, secrets' names and files changed in the project since the run are refused and named: leave those out with \"paths\", or the person applies them with `sandbox apply` at a terminal. At most 100 changes are put to the person at once: apply a larger run in parts with \"paths\".",
                project.display()
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "run": run,
                    "paths": {
                        "type": "array",
                        "items": {"type": "string"},
                        "maxItems": MOST_PATHS,
                        "description": "Apply only the changes at or below these project paths (default: every change)."
                    }
                },
                "required": ["run"],
                "additionalProperties": false
            },
            "annotations": {
                "title": "Apply a review run's changes",
                "readOnlyHint": false,
                "destructiveHint": true,
                "openWorldHint": false,
            },
        }),
        json!({
            "name": DISCARD_TOOL,
            "title": "Discard a review run's changes",
            "description": format!(
                "Drop every change a shell command or a skill made in review mode, without applying any to the project {}.",
                project.display()
            ),
            "inputSchema": {
                "type": "object",
                "properties": {"run": run},
                "required": ["run"],
                "additionalProperties": false
            },
            "annotations": {
                "title": "Discard a review run's changes",
                "readOnlyHint": false,
                "destructiveHint": true,
                "idempotentHint": false,
                "openWorldHint": false,
            },
        }),
    ]
}

/// What an apply call needs from the person, or its result at once.
pub enum Planned {
    /// A plan to put to the person.
    Ask(Plan),
    /// The call's result: nothing to apply, refused, or an error.
    Done(CallToolResult),
}

/// Plan `request` for `project`.
pub fn plan(store: &Store, project: &Path, request: &ChangesRequest) -> Planned {
    let planned = request
        .resolve(store, project)
        .and_then(|id| Ok(apply::plan(store, &id, &request.paths, Allow::default())?));
    match planned {
        Err(err) => Planned::Done(failure(&err)),
        Ok(plan) if plan.changes.is_empty() => Planned::Done(tools::failure(&format!(
            "apply_changes: run {} has no change left to apply",
            escape(&plan.id)
        ))),
        Ok(plan) if !plan.refusals.is_empty() => Planned::Done(refused(&plan.id, &plan.refusals)),
        Ok(plan) if plan.changes.len() > MOST_LISTED => Planned::Done(too_many(&plan)),
        Ok(plan) => Planned::Ask(plan),
    }
}

/// A plan longer than a question shows: the person would accept changes
/// they were never shown, so it is not put to them at all.
fn too_many(plan: &Plan) -> CallToolResult {
    let id = escape(&plan.id);
    let text = format!(
        "apply_changes: run {id} has {} changes to apply, more than the {MOST_LISTED} one question shows the person, so nothing was asked and nothing applied: apply them in parts of at most {MOST_LISTED} with \"paths\" (each path applies what is at or below it), or the person applies them with `sandbox apply {id}` in the project after `sandbox changes {id}`",
        plan.changes.len()
    );
    tools::with_structured(
        tools::failure(&text),
        json!({"run": id, "applied": [], "changes": plan.changes.len(), "most_asked": MOST_LISTED}),
    )
}

/// The `elicitation/create` request that shows `plan` to the person: every
/// change it would apply ([`plan`] puts no longer one to them).
pub fn question(plan: &Plan) -> Value {
    let mut message = format!(
        "Apply {} change(s) of review run {} to the project {}?\n",
        plan.changes.len(),
        escape(&plan.id),
        plan.project.display()
    );
    for change in &plan.changes {
        message.push_str("  ");
        message.push_str(&escape(&sandbox::broker::prompt::shorten(
            &sandbox::review::changes::headline(change),
            MOST_PATH_CHARS + 80,
        )));
        message.push('\n');
    }
    message.push_str(
        "Answer apply to write them into the project now, or keep to leave them kept for later.",
    );
    let title = format!("Apply {} change(s) to the project?", plan.changes.len());
    tools::choice_question(&message, &title, &["apply", "keep"])
}

/// Whether an elicitation result accepts: `accept` with `apply` chosen,
/// nothing else.
pub fn accepts(result: &Value) -> bool {
    result["action"] == "accept" && result["content"]["decision"] == "apply"
}

/// Apply `plan` once the person said `accepted`.
pub fn finish(store: &Store, plan: &Plan, accepted: bool) -> CallToolResult {
    if !accepted {
        return tools::with_structured(
            tools::failure(&format!(
                "apply_changes: the person did not accept; run {} keeps its changes",
                escape(&plan.id)
            )),
            json!({"run": escape(&plan.id), "applied": [], "accepted": false}),
        );
    }
    match apply::apply_plan(store, plan, Allow::default()) {
        Ok(applied) => applied_result(&plan.id, &applied),
        Err(ReviewError::Refused(refusals)) => refused(&plan.id, &refusals),
        Err(err) => failure(&ChangesError::Review(err)),
    }
}

/// Discard the run `request` names.
pub fn discard(store: &Store, project: &Path, request: &ChangesRequest) -> CallToolResult {
    let discarded = request
        .resolve(store, project)
        .and_then(|id| store.discard(&id).map(|()| id).map_err(ChangesError::from));
    match discarded {
        Ok(id) => {
            let id = escape(&id);
            tools::with_structured(
                CallToolResult::success(vec![ContentBlock::text(format!(
                    "run {id}: changes discarded; nothing reached the project"
                ))]),
                json!({"run": id, "discarded": true}),
            )
        }
        Err(err) => failure(&err),
    }
}

fn applied_result(id: &str, applied: &Applied) -> CallToolResult {
    let id = escape(id);
    let paths: Vec<String> = applied.applied.iter().map(|p| shown_path(p)).collect();
    let mut text = format!("run {id}: {} change(s) applied", paths.len());
    if applied.remaining > 0 {
        text.push_str(&format!(
            "; {} still kept (not selected)",
            applied.remaining
        ));
    }
    tools::with_structured(
        CallToolResult::success(vec![ContentBlock::text(text)]),
        json!({"run": id, "accepted": true, "applied": paths, "remaining": applied.remaining}),
    )
}

/// A refusal naming each path, why, and what the person can do.
fn refused(id: &str, refusals: &[sandbox::review::Refusal]) -> CallToolResult {
    let id = escape(id);
    let mut text =
        format!("apply_changes: run {id}: nothing was applied, and the person was not asked:\n");
    let listed: Vec<Value> = refusals
        .iter()
        .map(|r| {
            let path = r.path.as_deref().map(shown_path);
            text.push_str("  ");
            if let Some(path) = &path {
                text.push_str(path);
                text.push_str(": ");
            }
            text.push_str(&escape(&r.reason));
            if let Some(flag) = &r.flag {
                text.push_str(&format!(
                    " (only a person can allow it: `sandbox apply {id} {} {flag}` in the project)",
                    path.as_deref().unwrap_or("")
                ));
            }
            text.push('\n');
            json!({"path": path, "reason": escape(&r.reason), "flag": r.flag})
        })
        .collect();
    text.push_str("Call again with \"paths\" that leave these out to apply the rest.");
    tools::with_structured(
        tools::failure(&text),
        json!({"run": id, "applied": [], "refused": listed}),
    )
}

fn failure(err: &ChangesError) -> CallToolResult {
    tools::failure(&escape(&err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn only_run_and_paths_are_taken_and_no_override() {
        let ok =
            ChangesRequest::from_arguments(&args(json!({"run": "last", "paths": ["a"]})), true)
                .unwrap();
        assert_eq!(ok.paths, ["a"]);
        for bad in [
            json!({"run": "x", "allow_protected": true}),
            json!({"run": "x", "flags": ["--allow-ci"]}),
            json!({"paths": ["a"]}),
            json!({"run": 3}),
            json!({"run": "x", "paths": "a"}),
            json!({"run": "x", "paths": [1]}),
            json!({"run": "x", "paths": ["a\u{0}b"]}),
        ] {
            assert!(
                ChangesRequest::from_arguments(&args(bad.clone()), true).is_err(),
                "{bad}"
            );
        }
        assert!(
            ChangesRequest::from_arguments(&args(json!({"run": "x", "paths": []})), false).is_err()
        );
        let many: Vec<String> = (0..=MOST_PATHS).map(|i| i.to_string()).collect();
        assert!(
            ChangesRequest::from_arguments(&args(json!({"run": "x", "paths": many})), true)
                .is_err()
        );
    }

    #[test]
    fn only_accepting_apply_accepts() {
        assert!(accepts(
            &json!({"action": "accept", "content": {"decision": "apply"}})
        ));
        for no in [
            json!({"action": "accept", "content": {"decision": "keep"}}),
            json!({"action": "accept", "content": {"decision": "APPLY"}}),
            json!({"action": "accept", "content": {}}),
            json!({"action": "decline", "content": {"decision": "apply"}}),
            json!({"action": "cancel"}),
            Value::Null,
        ] {
            assert!(!accepts(&no), "{no}");
        }
    }
}
