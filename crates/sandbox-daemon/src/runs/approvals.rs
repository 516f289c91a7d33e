//! Approvals: the questions a run's broker asks, kept bounded (the
//! supervisor that relays them is the caller's), listed, and answered.

use serde::Serialize;

use super::{lock, Control, Runs};
use crate::error::ApiError;
use crate::verdict;
use sandbox::launch::protocol::Approval;

/// One open question of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Question {
    /// `<run>/<n>`.
    pub id: String,
    /// The run.
    pub run: String,
    /// Who asks (`command:…`).
    pub caller: String,
    /// The broker action.
    pub action: String,
    /// Its target.
    pub target: Option<String>,
    /// When it is denied unanswered.
    pub deadline_ms: u64,
    #[serde(skip)]
    uid: u32,
}

impl Runs {
    /// Keep question `n` of run `id` unless the run holds
    /// [`verdict::MAX_OPEN_QUESTIONS`] open ones already; its fields are
    /// cut to [`verdict::MAX_QUESTION_TEXT`]. False when it was refused.
    pub(super) fn keep_question(
        &self,
        id: &str,
        n: u64,
        caller: String,
        action: String,
        target: Option<String>,
        deadline_ms: u64,
    ) -> bool {
        let now = sandbox::clock::unix_ms();
        let mut state = lock(&self.state);
        let Some(live) = state.running.get_mut(id) else {
            return false;
        };
        live.questions.retain(|_, q| q.deadline_ms > now);
        if !live.questions.contains_key(&n) && live.questions.len() >= verdict::MAX_OPEN_QUESTIONS {
            return false;
        }
        tracing::debug!(run = %id, question = n, action = %action, "question asked");
        let uid = live.uid;
        live.questions.insert(
            n,
            Question {
                id: format!("{id}/{n}"),
                run: id.to_string(),
                caller: verdict::bounded_text(caller),
                action: verdict::bounded_text(action),
                target: target.map(verdict::bounded_text),
                deadline_ms,
                uid,
            },
        );
        true
    }

    /// Open questions of runs `uid` may see (`None`: every run's).
    pub fn questions(&self, uid: Option<u32>) -> Vec<Question> {
        let now = sandbox::clock::unix_ms();
        let state = lock(&self.state);
        let mut out: Vec<Question> = state
            .running
            .values()
            .flat_map(|live| live.questions.values())
            .filter(|q| uid.is_none_or(|uid| q.uid == uid) && q.deadline_ms > now)
            .cloned()
            .collect();
        out.sort_by(|a, b| a.deadline_ms.cmp(&b.deadline_ms).then(a.id.cmp(&b.id)));
        out
    }

    /// Answer a question of a run `uid` may see.
    pub fn answer(
        &self,
        uid: Option<u32>,
        run: &str,
        n: u64,
        answer: Approval,
    ) -> Result<(), ApiError> {
        let missing = || {
            ApiError::new(
                404,
                "no_such_approval",
                format!("no open question {run}/{n}"),
                "list open questions with GET /v1/approvals; an unanswered one is denied at its deadline",
            )
        };
        let mut state = lock(&self.state);
        let live = state.running.get_mut(run).ok_or_else(missing)?;
        if uid.is_some_and(|uid| live.uid != uid) {
            return Err(missing());
        }
        match live.questions.get(&n) {
            Some(q) if q.deadline_ms > sandbox::clock::unix_ms() => {}
            _ => return Err(missing()),
        }
        live.questions.remove(&n);
        tracing::debug!(run = %run, question = n, answer = ?answer, "question answered");
        live.control
            .send(Control::Answer(n, answer))
            .map_err(|_| missing())
    }
}
