//! `GET /v1/runs/ID/changes`, `POST /v1/runs/ID/apply` and
//! `POST /v1/runs/ID/discard`: a review run's kept changes, for the caller
//! who owns the run and no one else (see [`crate::review`]).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::connect_info::ConnectInfo;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use tokio::sync::mpsc;

use super::{
    bad_body, blocking, body_bytes, load_visible, query, who, App, ChannelBody, Peer, Shared,
};
use crate::error::ApiError;
use crate::resolve::Caller;
use crate::review::{review_id, ApplyRequest, HelperOutput, HELPER_TIMEOUT};

fn args(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// The run's review id, for its owner only. Another caller's run, even
/// one a `see_all` rule lets them list, answers as a run that does not
/// exist: its changes are the owner's project.
async fn owned_review(app: &Arc<App>, peer: Peer, id: &str) -> Result<(Caller, String), ApiError> {
    let who = who(app, peer)?;
    let record = load_visible(app, &who, id).await?;
    if record.uid != who.caller.uid {
        return Err(ApiError::no_such_run(id));
    }
    if !record.is_finished() {
        return Err(ApiError::not_finished(
            id,
            &record.state,
            "; its changes are kept when it ends",
            format!("wait for it (GET /v1/runs/{id}), then ask again"),
        ));
    }
    match review_id(record.report.as_ref()) {
        Some(review) => Ok((who.caller, review)),
        None => Err(ApiError::new(
            404,
            "no_changes",
            format!("run {id} kept no changes for review"),
            "submit the run with \"review\": true (or a profile with [filesystem] review = true) to keep its changes",
        )),
    }
}

/// A helper that failed: the store has no such run any more (applied
/// or discarded), or the helper's own message.
fn helper_failed<T>(id: &str, out: &HelperOutput<T>) -> ApiError {
    if out.stderr.contains("is kept in") || out.stderr.contains("is not a run id") {
        return ApiError::new(
            404,
            "no_changes",
            format!("run {id} keeps no changes any more (they were applied or discarded)"),
            "submit the run again",
        );
    }
    ApiError::new(
        409,
        "review_failed",
        format!("run {id}: {}", out.stderr),
        "see the message; the run's changes stay kept",
    )
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChangesQuery {
    /// Add the rendered changes (a unified diff for text files).
    #[serde(default)]
    diff: bool,
}

/// `GET /v1/runs/ID/changes[?diff=true]`: the listing `sandbox changes
/// --json` prints, with `id`, `review` and (asked for) `diff`, the text
/// `sandbox changes` prints, as one JSON object.
///
/// Both helpers have ended, and said whether they succeeded, before the
/// answer starts, so every refusal keeps its status; their outputs (up to
/// 64 MiB each) are spooled to unnamed files and the object is streamed
/// from them: the listing's bytes as the helper wrote them (checked to be
/// one JSON object first), the diff escaped a read at a time. The daemon
/// holds a few reads, not the answer: building it whole made it grow by
/// about twice the diff per request.
pub(super) async fn changes(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
    q: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let (caller, review) = owned_review(&app, peer, &id).await?;
    let stores = &app.runs.review;
    // One of the caller's places for the whole request: its spooled
    // files live until the answer is sent.
    let slot = stores.slot(caller.uid)?;
    let listing = stores
        .helper_spooled(&slot, caller, &args(&["changes", "--json", "--", &review]))
        .await?;
    if listing.status != Some(0) {
        return Err(helper_failed(&id, &listing));
    }
    let listing = listing.stdout;
    let (listing, object) = blocking(move || {
        let mut file = listing;
        let object = listing_object(&mut file)
            .map_err(|err| ApiError::internal(format!("the review listing: {err}")))?;
        Ok((file, object))
    })
    .await?;
    let diff = if q.diff {
        let out = stores
            .helper_spooled(&slot, caller, &args(&["changes", "--", &review]))
            .await?;
        if out.status != Some(0) {
            return Err(helper_failed(&id, &out));
        }
        Some(out.stdout)
    } else {
        None
    };
    let mut tail = String::from(if object.keys > 0 { "," } else { "" });
    tail.push_str(&format!(
        "\"id\":{},\"review\":{}",
        serde_json::Value::from(id.as_str()),
        serde_json::Value::from(review.as_str())
    ));
    let (sender, receiver) = mpsc::channel(3);
    tokio::spawn(async move {
        let _slot = slot;
        // Kept for the end: a caller that stopped reading still gets its
        // answer broken off rather than ended as if whole.
        let Ok(broken) = sender.reserve().await else {
            return;
        };
        let send = send_changes(&sender, listing, object.end, tail, diff);
        let failed = match tokio::time::timeout(HELPER_TIMEOUT, send).await {
            Ok(Ok(())) => return,
            Ok(Err(err)) => err,
            Err(_) => std::io::Error::other("the caller read the answer for too long"),
        };
        // A caller that hung up is no news.
        if !sender.is_closed() {
            tracing::warn!("sending the changes of run {id}: {failed}");
        }
        broken.send(Err(failed));
    });
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        Body::new(ChannelBody(receiver)),
    )
        .into_response())
}

/// Bytes of the spooled outputs read at once.
const SEND_READ: usize = 64 << 10;

/// What the listing's check found: where its closing brace is, and
/// whether it has members before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ListingObject {
    /// Offset of the closing `}`.
    end: u64,
    /// Members of the object.
    keys: usize,
}

/// Check that the spooled listing is one JSON object without the members
/// the daemon adds (`id`, `review`, `diff`), reading it a buffer at a time
/// (a string at most is held); the file is left at its start.
fn listing_object(file: &mut std::fs::File) -> Result<ListingObject, String> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let reader = std::io::BufReader::with_capacity(SEND_READ, &mut *file);
    let mut values = serde_json::Deserializer::from_reader(reader).into_iter::<TopKeys>();
    let keys = match values.next() {
        Some(Ok(TopKeys::Keys(keys))) => keys,
        Some(Ok(TopKeys::Reserved(key))) => {
            return Err(format!("it has a member {key:?} of its own"))
        }
        Some(Err(err)) => return Err(err.to_string()),
        None => return Err("it is empty".into()),
    };
    let end = values.byte_offset() as u64;
    if values.next().is_some() {
        return Err("more than one JSON value".into());
    }
    // serde_json skips a string it does not keep without decoding it,
    // and these bytes are sent as they are: they must be UTF-8 too.
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    utf8_up_to(file, end)?;
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    Ok(ListingObject {
        end: end.saturating_sub(1),
        keys,
    })
}

/// Check that `file`'s first `len` bytes are UTF-8, a buffer at a time
/// (a character cut by the buffer is carried to the next).
fn utf8_up_to(file: &mut std::fs::File, len: u64) -> Result<(), String> {
    use std::io::Read;
    let mut left = len;
    let mut buf = vec![0; SEND_READ];
    let mut carried = 0;
    while left > 0 {
        let want = (left.min((SEND_READ - carried) as u64)) as usize;
        let n = match file.read(&mut buf[carried..carried + want]) {
            Ok(0) => return Err("the listing's file ended early".into()),
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err.to_string()),
        };
        left -= n as u64;
        let held = carried + n;
        carried = match std::str::from_utf8(&buf[..held]) {
            Ok(_) => 0,
            Err(err) if err.error_len().is_none() && left > 0 => {
                let valid = err.valid_up_to();
                buf.copy_within(valid..held, 0);
                held - valid
            }
            Err(err) => {
                return Err(format!(
                    "it is not UTF-8 (byte {})",
                    len - left - (held - err.valid_up_to()) as u64
                ))
            }
        };
    }
    Ok(())
}

/// A JSON object's top-level member count, or the first member that is
/// one of the daemon's; the values are skipped, not kept (serde_json
/// skips a string without buffering it), and a member's name is looked at
/// where the parser holds it, not copied.
enum TopKeys {
    Keys(usize),
    Reserved(&'static str),
}

/// A member's name, as far as the daemon cares.
struct Member(Option<&'static str>);

impl<'de> serde::Deserialize<'de> for Member {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Member, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Member;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a member's name")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Member, E> {
                Ok(Member(
                    ["id", "review", "diff"]
                        .into_iter()
                        .find(|own| *own == name),
                ))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

impl<'de> serde::Deserialize<'de> for TopKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<TopKeys, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = TopKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<TopKeys, A::Error> {
                let mut keys = 0;
                let mut reserved = None;
                while let Some(Member(own)) = map.next_key::<Member>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    reserved = reserved.or(own);
                    keys += 1;
                }
                Ok(reserved.map_or(TopKeys::Keys(keys), TopKeys::Reserved))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// Stream the answer: the listing up to its closing brace, `tail` (the
/// daemon's members), the diff as a JSON string, and the brace.
async fn send_changes(
    sender: &mpsc::Sender<Result<Bytes, std::io::Error>>,
    listing: std::fs::File,
    end: u64,
    tail: String,
    diff: Option<std::fs::File>,
) -> std::io::Result<()> {
    let send = |bytes: Vec<u8>| async move {
        sender
            .send(Ok(Bytes::from(bytes)))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    };
    let mut listing = Some(listing);
    let mut left = end;
    while left > 0 {
        let want = left.min(SEND_READ as u64) as usize;
        let chunk = read_chunk(&mut listing, want).await?;
        if chunk.is_empty() {
            return Err(std::io::Error::other("the listing's file ended early"));
        }
        left -= chunk.len() as u64;
        send(chunk).await?;
    }
    send(tail.into_bytes()).await?;
    if let Some(diff) = diff {
        send(b",\"diff\":\"".to_vec()).await?;
        let mut diff = Some(diff);
        let mut text = JsonText::default();
        loop {
            let chunk = read_chunk(&mut diff, SEND_READ).await?;
            let piece = text.piece(&chunk, chunk.is_empty());
            if !piece.is_empty() {
                send(piece).await?;
            }
            if chunk.is_empty() {
                break;
            }
        }
        send(b"\"".to_vec()).await?;
    }
    send(b"}".to_vec()).await
}

/// Up to `want` bytes from `file`'s position (empty at its end), read on
/// a blocking thread; the file is lent to it and given back.
async fn read_chunk(file: &mut Option<std::fs::File>, want: usize) -> std::io::Result<Vec<u8>> {
    let Some(mut lent) = file.take() else {
        return Err(std::io::Error::other("a spooled file was lost"));
    };
    let (back, read) = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut chunk = vec![0; want];
        let read = loop {
            match lent.read(&mut chunk) {
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        (
            lent,
            read.map(|n| {
                chunk.truncate(n);
                chunk
            }),
        )
    })
    .await
    .map_err(std::io::Error::other)?;
    *file = Some(back);
    read
}

/// Bytes read in pieces turned into the inside of one JSON string, as
/// `String::from_utf8_lossy` and serde_json would turn them whole: a
/// character split between two pieces is joined, and each invalid
/// sequence becomes one U+FFFD.
#[derive(Debug, Default)]
struct JsonText {
    /// The start of a character the last piece ended in.
    carry: Vec<u8>,
}

impl JsonText {
    /// The escaped text of `bytes` (with what was carried); `last`: no more
    /// bytes come, so an unended character is invalid.
    fn piece(&mut self, bytes: &[u8], last: bool) -> Vec<u8> {
        let mut held = std::mem::take(&mut self.carry);
        held.extend_from_slice(bytes);
        let mut text = String::with_capacity(held.len());
        let mut rest = &held[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    break;
                }
                Err(err) => {
                    let (valid, after) = rest.split_at(err.valid_up_to());
                    // from_utf8 said these bytes are valid.
                    text.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match err.error_len() {
                        Some(bad) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        None if last => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            break;
                        }
                        None => {
                            self.carry = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        let mut quoted = serde_json::to_vec(&text).unwrap_or_default();
        // The quotes are the caller's: pieces are parts of one string.
        quoted.pop();
        if !quoted.is_empty() {
            quoted.remove(0);
        }
        quoted
    }
}

/// `POST /v1/runs/ID/apply`: 200 with what was applied, or 409 with each
/// refusal (path, reason, flag) and nothing applied.
pub(super) async fn apply(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(body)?;
    let request: ApplyRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ApplyRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|err| bad_body(&err))?
    };
    let (caller, review) = owned_review(&app, peer, &id).await?;
    let arguments = request.arguments(&review)?;
    let out = app.runs.review.helper(caller, &arguments).await?;
    let parsed = serde_json::from_slice::<serde_json::Value>(&out.stdout).ok();
    let (status, mut answer) = match (out.status, parsed) {
        (Some(0), Some(applied)) => (StatusCode::OK, applied),
        (Some(1), Some(refused)) if refused.get("refused").is_some() => {
            (StatusCode::CONFLICT, refused)
        }
        _ => return Err(helper_failed(&id, &out)),
    };
    answer["id"] = id.into();
    if answer.get("refused").is_none() {
        answer["refused"] = serde_json::json!([]);
    }
    Ok((status, Json(answer)).into_response())
}

/// `POST /v1/runs/ID/discard`.
pub(super) async fn discard(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (caller, review) = owned_review(&app, peer, &id).await?;
    let out = app
        .runs
        .review
        .helper(caller, &args(&["discard", "--", &review]))
        .await?;
    if out.status != Some(0) {
        return Err(helper_failed(&id, &out));
    }
    Ok(Json(serde_json::json!({"id": id, "discarded": true})).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer's `diff` as it was built whole: lossy UTF-8, escaped.
    fn whole(bytes: &[u8]) -> Vec<u8> {
        let mut quoted = serde_json::to_vec(&String::from_utf8_lossy(bytes).into_owned()).unwrap();
        quoted.pop();
        quoted.remove(0);
        quoted
    }

    #[test]
    fn a_diff_escaped_in_pieces_is_the_diff_escaped_whole() {
        let diff = "+ok \"quoted\" \\ tab\t é ✓ 😀\n".as_bytes();
        let mut bytes = diff.to_vec();
        // Invalid: a lone continuation byte, an overlong form, a cut
        // character at the very end.
        bytes.extend_from_slice(&[0x80, b'a', 0xc0, 0xaf, b'\n', 0x01, 0xf0, 0x9f, 0x98]);
        let expected = whole(&bytes);
        for first in 0..=bytes.len() {
            for second in first..=bytes.len() {
                let mut text = JsonText::default();
                let mut got = text.piece(&bytes[..first], false);
                got.extend(text.piece(&bytes[first..second], false));
                got.extend(text.piece(&bytes[second..], false));
                got.extend(text.piece(&[], true));
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&expected),
                    "split at {first} and {second}"
                );
            }
        }
    }

    fn spooled(text: &str) -> std::fs::File {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    #[test]
    fn the_listing_is_one_object_without_the_daemons_members() {
        let listing = "{\"run\": {\"id\": \"a}\"}, \"changes\": []}  \n";
        let object = listing_object(&mut spooled(listing)).unwrap();
        assert_eq!(object.keys, 2);
        assert_eq!(&listing[object.end as usize..], "}  \n");
        let empty = listing_object(&mut spooled("{}")).unwrap();
        assert_eq!((empty.end, empty.keys), (1, 0));
        for bad in [
            "",
            "[]",
            "{\"run\": 1",
            "{} {}",
            "{\"run\": 1} x",
            "{\"id\": \"forged\"}",
            "{\"a\": 1, \"diff\": \"forged\"}",
        ] {
            assert!(listing_object(&mut spooled(bad)).is_err(), "{bad:?}");
        }
    }

    /// The listing's bytes are sent as they were written, so a value the
    /// check skipped without decoding must still be UTF-8: a helper
    /// writing a stray byte (0xff), a cut character or a surrogate's
    /// encoding inside a skipped string would have the daemon answer with
    /// text that is not JSON; a character cut by the check's buffer is
    /// whole and passes.
    #[test]
    fn a_listing_that_is_not_utf8_is_refused() {
        use std::io::Write;
        for bad in [
            &b"{\"changes\": [\"\xff\"]}"[..],
            b"{\"run\": {\"path\": \"a\xc3\"}}",
            b"{\"run\": \"\xed\xa0\x80\"}",
        ] {
            let mut file = tempfile::tempfile().unwrap();
            file.write_all(bad).unwrap();
            assert!(
                listing_object(&mut file).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut long = String::from("{\"changes\": [\"");
        while long.len() < SEND_READ * 2 + 1 {
            long.push('é');
        }
        long.push_str("\"]}");
        let object = listing_object(&mut spooled(&long)).unwrap();
        assert_eq!(object.keys, 1);
    }
}
