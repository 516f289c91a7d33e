//! Finding a secret's value in what a host sends back, in the forms an
//! echo gives it: as sent, inside JSON string escapes (`\"`, `\/`,
//! `\u0041`), percent-encoded (any mix of escaped and plain bytes, upper
//! or lower hex), as hex (any case), and as base64 or base64url (with or
//! without padding, alone or inside a longer base64 text at any of the
//! three byte alignments), line breaks anywhere in between. Each
//! occurrence becomes the secret's handle.
//!
//! What no literal search finds (compressed bodies, encryption, any
//! transformation the host chooses) is not claimed: the broker keeps
//! encoded bodies from hosts a secret is bound to ([`super::http`]), and
//! the rest is the person's choice of which hosts to trust with a secret.

use base64::Engine;

/// Values shorter than this are redacted only as written and escaped: the
/// hex and base64 forms of one to three bytes are a few characters that
/// occur everywhere by chance.
const MIN_ENCODED_VALUE: usize = 4;

/// A value to find and the handle to put in its place.
pub(crate) struct Needle<'a> {
    pub value: &'a [u8],
    pub handle: &'a str,
}

/// `haystack` with every form of every needle's value replaced by its
/// handle. A body cut at a size cap (`cut`) may end inside a form: the
/// longest tail that begins one is dropped too, so not even a prefix of a
/// value leaves.
pub(crate) fn redact(haystack: &[u8], needles: &[Needle<'_>], cut: bool) -> Vec<u8> {
    let needles: Vec<&Needle<'_>> = needles.iter().filter(|n| !n.value.is_empty()).collect();
    if needles.is_empty() {
        return haystack.to_vec();
    }
    let haystack = if cut {
        &haystack[..haystack.len() - incomplete_escape_len(haystack)]
    } else {
        haystack
    };
    let forms: Vec<(Form, &str)> = needles
        .iter()
        .flat_map(|needle| {
            forms(needle.value)
                .into_iter()
                .map(move |form| (form, needle.handle))
        })
        .collect();
    let mut spans: Vec<Span> = Vec::new();
    let mut tail_from = haystack.len();
    let mut search = |view: &View, escaped_inside: Option<Escape>| {
        for (index, start, end) in find_all(&view.bytes, &forms, escaped_inside) {
            let (form, handle) = &forms[index];
            let (start, end) = form.widen(&view.bytes, start, end);
            let (start, end) = view.raw_span(start, end);
            spans.push(Span { start, end, handle });
        }
        if cut {
            for (form, _) in &forms {
                if let Some(start) = form.started_at_end(&view.bytes) {
                    tail_from = tail_from.min(view.raw_start(start));
                }
            }
        }
    };
    // One view per order of decoding, each kind also alone: an escape of
    // one kind that the sandbox's payload puts just before a value (`%ab`
    // before `ab3F\/xyz`, `\u00` before `ab%2Fxyz`) would, decoded with
    // the other kind in one pass, eat the value's first characters; the
    // view that decodes only the kind inside the value leaves that prefix
    // as it is. Each view is one pass over the body, searched and dropped
    // before the next is made (a view's map back to the body is 16 bytes
    // a byte: fresh pages for every view cost more than the search).
    let raw = View::raw(haystack);
    search(&raw, None);
    for first in [Escape::Json, Escape::Percent] {
        let second = match first {
            Escape::Json => Escape::Percent,
            Escape::Percent => Escape::Json,
        };
        let one_kind = raw.decoded(first);
        search(&one_kind, Some(second));
        let both = one_kind.decoded(second);
        drop(one_kind);
        search(&both, None);
    }
    spans.sort_by_key(|span| (span.start, std::cmp::Reverse(span.end)));
    let mut out = Vec::with_capacity(haystack.len());
    let mut at = 0;
    let mut index = 0;
    while index < spans.len() {
        // Overlapping occurrences (one value inside another, a form found
        // in both views) become one handle: the longest occurrence's.
        let first = &spans[index];
        let (start, mut end, mut handle, mut longest) = (
            first.start,
            first.end,
            first.handle,
            first.end - first.start,
        );
        index += 1;
        while index < spans.len() && spans[index].start < end {
            let span = &spans[index];
            if span.end - span.start > longest {
                longest = span.end - span.start;
                handle = span.handle;
            }
            end = end.max(span.end);
            index += 1;
        }
        if start < at {
            continue;
        }
        out.extend_from_slice(&haystack[at..start]);
        out.extend_from_slice(handle.as_bytes());
        at = end;
    }
    if tail_from >= at {
        out.extend_from_slice(&haystack[at..tail_from]);
    } else {
        out.extend_from_slice(&haystack[at..]);
    }
    out
}

struct Span<'a> {
    start: usize,
    end: usize,
    handle: &'a str,
}

/// How many bytes at the end of `bytes` are an escape cut short (`%`,
/// `%4`, `\`, `\u00`): as written they hide the byte they would have
/// decoded to from the search.
fn incomplete_escape_len(bytes: &[u8]) -> usize {
    let ends_with = |tail: &[u8]| bytes.ends_with(tail);
    let hex_digits = bytes
        .iter()
        .rev()
        .take(3)
        .take_while(|b| b.is_ascii_hexdigit())
        .count();
    if ends_with(b"%") {
        return 1;
    }
    if hex_digits >= 1 && bytes[..bytes.len() - 1].ends_with(b"%") {
        return 2;
    }
    if let Some(digits) =
        (0..=hex_digits).find(|&digits| bytes[..bytes.len() - digits].ends_with(b"\\u"))
    {
        return digits + 2;
    }
    usize::from(ends_with(b"\\"))
}

/// The haystack as searched: the bytes, and for a decoded view where each
/// byte came from.
struct View {
    bytes: Vec<u8>,
    /// Raw `[start, end)` of each byte; `None` for the raw view itself.
    origin: Option<Vec<(usize, usize)>>,
}

impl View {
    fn raw(bytes: &[u8]) -> View {
        View {
            bytes: bytes.to_vec(),
            origin: None,
        }
    }

    /// This view with the escapes of `kind` decoded, line breaks left
    /// out (base64 and hex are often wrapped; a value never holds one, as
    /// a header cannot carry it).
    fn decoded(&self, kind: Escape) -> View {
        let text = &self.bytes;
        let mut bytes = Vec::with_capacity(text.len());
        let mut origin = Vec::with_capacity(text.len());
        let mut at = 0;
        while at < text.len() {
            let (decoded, used) = decode_escape(&text[at..], kind);
            let mut utf8 = [0u8; 4];
            let decoded: &[u8] = match decoded {
                Decoded::Byte(byte) => {
                    utf8[0] = byte;
                    &utf8[..1]
                }
                Decoded::Char(c) => c.encode_utf8(&mut utf8).as_bytes(),
            };
            for &byte in decoded {
                if byte != b'\r' && byte != b'\n' {
                    bytes.push(byte);
                    origin.push(self.raw_span(at, at + used));
                }
            }
            at += used;
        }
        View {
            bytes,
            origin: Some(origin),
        }
    }

    fn raw_start(&self, index: usize) -> usize {
        match &self.origin {
            None => index,
            Some(origin) => origin.get(index).map_or(usize::MAX, |o| o.0),
        }
    }

    fn raw_span(&self, start: usize, end: usize) -> (usize, usize) {
        match &self.origin {
            None => (start, end),
            Some(origin) => (origin[start].0, origin[end - 1].1),
        }
    }
}

/// A kind of escape a host may echo a value in.
#[derive(Clone, Copy, PartialEq)]
enum Escape {
    /// `%2F`, either case.
    Percent,
    /// JSON string escapes: `\/`, `\"`, `\u0041`, surrogate pairs.
    Json,
}

/// The character the escape of `kind` at the start of `raw`
/// stands for and the escape's length; a byte that starts no such escape
/// stands for itself.
fn decode_escape(raw: &[u8], kind: Escape) -> (Decoded, usize) {
    let hex = |bytes: &[u8]| -> Option<u32> {
        bytes
            .iter()
            .try_fold(0u32, |acc, &b| Some(acc * 16 + char::from(b).to_digit(16)?))
    };
    let literal = (Decoded::Byte(raw.first().copied().unwrap_or_default()), 1);
    match raw {
        [b'%', a, b, ..] if kind == Escape::Percent => match hex(&[*a, *b]) {
            Some(byte) => (Decoded::Byte(byte as u8), 3),
            None => literal,
        },
        [b'\\', ..] if kind != Escape::Json => literal,
        [b'\\', b'u', rest @ ..] if rest.len() >= 4 => {
            let Some(unit) = hex(&rest[..4]) else {
                return literal;
            };
            let (code, used) = match (unit, rest.get(4..10)) {
                (0xd800..=0xdbff, Some([b'\\', b'u', low @ ..])) => match hex(low) {
                    Some(low @ 0xdc00..=0xdfff) => {
                        (0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00), 12)
                    }
                    _ => (unit, 6),
                },
                _ => (unit, 6),
            };
            match char::from_u32(code) {
                Some(c) => (Decoded::Char(c), used),
                None => literal,
            }
        }
        [b'\\', escaped, ..] => match escaped {
            b'"' | b'\\' | b'/' => (Decoded::Byte(*escaped), 2),
            b'n' => (Decoded::Byte(b'\n'), 2),
            b'r' => (Decoded::Byte(b'\r'), 2),
            b't' => (Decoded::Byte(b'\t'), 2),
            b'b' => (Decoded::Byte(0x08), 2),
            b'f' => (Decoded::Byte(0x0c), 2),
            _ => literal,
        },
        _ => literal,
    }
}

/// What one escape (or one plain byte) stands for.
enum Decoded {
    Byte(u8),
    Char(char),
}

/// One form of a value as it may appear in a body.
struct Form {
    text: Vec<u8>,
    ignore_case: bool,
    /// For a base64 core: characters on each side that hold bits of the
    /// value mixed with bits of its neighbours, and the alphabet.
    base64: Option<(usize, usize, &'static [u8; 64])>,
}

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl Form {
    /// An occurrence `[start, end)` widened over the partial base64
    /// characters around it and any padding after it.
    fn widen(&self, view: &[u8], start: usize, end: usize) -> (usize, usize) {
        let Some((left, right, alphabet)) = self.base64 else {
            return (start, end);
        };
        let mut start = start;
        for _ in 0..left {
            if start > 0 && alphabet.contains(&view[start - 1]) {
                start -= 1;
            }
        }
        let mut end = end;
        for _ in 0..right {
            if end < view.len() && alphabet.contains(&view[end]) {
                end += 1;
            }
        }
        while end < view.len() && view[end] == b'=' {
            end += 1;
        }
        (start, end)
    }

    /// Where the longest proper prefix of this form that ends `view`
    /// begins, if one does.
    fn started_at_end(&self, view: &[u8]) -> Option<usize> {
        (1..self.text.len()).rev().find_map(|len| {
            let tail = view.get(view.len().checked_sub(len)?..)?;
            let prefix = &self.text[..len];
            let same = if self.ignore_case {
                tail.eq_ignore_ascii_case(prefix)
            } else {
                tail == prefix
            };
            same.then(|| view.len() - len)
        })
    }
}

/// Every form `value` is searched in.
fn forms(value: &[u8]) -> Vec<Form> {
    let mut forms = vec![Form {
        text: value.to_vec(),
        ignore_case: false,
        base64: None,
    }];
    if value.len() < MIN_ENCODED_VALUE {
        return forms;
    }
    forms.push(Form {
        text: value
            .iter()
            .flat_map(|b| format!("{b:02x}").into_bytes())
            .collect(),
        ignore_case: true,
        base64: None,
    });
    for offset in 0..3 {
        let (core, left, right) = base64_core(value, offset);
        let url_safe: Vec<u8> = core
            .iter()
            .map(|&c| match c {
                b'+' => b'-',
                b'/' => b'_',
                other => other,
            })
            .collect();
        let differs = url_safe != core;
        forms.push(Form {
            text: core,
            ignore_case: false,
            base64: Some((left, right, STANDARD)),
        });
        if differs {
            forms.push(Form {
                text: url_safe,
                ignore_case: false,
                base64: Some((left, right, URL_SAFE)),
            });
        }
    }
    forms
}

/// The base64 characters that depend on `value` alone when it starts
/// `offset` bytes into the encoded data, and how many characters on the
/// left and the right hold some of its bits mixed with a neighbour's.
fn base64_core(value: &[u8], offset: usize) -> (Vec<u8>, usize, usize) {
    let mut data = vec![0u8; offset];
    data.extend_from_slice(value);
    let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&data);
    let first_bit = 8 * offset;
    let end_bit = 8 * (offset + value.len());
    let first = first_bit.div_ceil(6);
    let end = end_bit / 6;
    let left = usize::from(first_bit % 6 != 0);
    let right = usize::from(end_bit % 6 != 0);
    (encoded.as_bytes()[first..end].to_vec(), left, right)
}

/// Every occurrence of every form in `haystack` as (form index, start,
/// end), overlapping ones included. One pass for all forms, a table of
/// first bytes deciding which to compare at each position: a body of the
/// largest size is searched for a dozen forms per secret.
///
/// With `escaped_inside`, a form also matches where some of its bytes
/// after the first are escapes of that kind: searched in a view with the
/// other kind decoded, a value holding both kinds (`ab3F\/xyz%2B...`) is
/// found from its first byte on, whatever escape the payload put before
/// it to swallow that byte in a view decoding both.
///
/// The two hex digits after a `%` match in either case: a host that
/// normalises percent escapes (RFC 3986 makes `%ab` and `%AB` the same)
/// turns a `%` the payload put before a value starting with hex digits
/// into `%AB3F...`, changing the value's first characters' case.
fn find_all(
    haystack: &[u8],
    forms: &[(Form, &str)],
    escaped_inside: Option<Escape>,
) -> Vec<(usize, usize, usize)> {
    let mut by_first: Vec<Vec<usize>> = vec![Vec::new(); 256];
    for (index, (form, _)) in forms.iter().enumerate() {
        let Some(&first) = form.text.first() else {
            continue;
        };
        by_first[usize::from(first)].push(index);
    }
    let same_byte = |at: usize, expected: u8| {
        let byte = haystack[at];
        byte == expected || (after_percent(haystack, at) && byte.eq_ignore_ascii_case(&expected))
    };
    let mut found = Vec::new();
    for (at, &byte) in haystack.iter().enumerate() {
        let swapped = if byte.is_ascii_lowercase() {
            byte.to_ascii_uppercase()
        } else {
            byte.to_ascii_lowercase()
        };
        let candidates = by_first[usize::from(byte)].iter();
        let other_case = if swapped != byte {
            by_first[usize::from(swapped)].as_slice()
        } else {
            &[]
        };
        for &index in candidates.chain(other_case) {
            let form = &forms[index].0;
            let end = at + form.text.len();
            if end > haystack.len() {
                continue;
            }
            let same = if form.ignore_case {
                haystack[at..end].eq_ignore_ascii_case(&form.text)
            } else if haystack[at..end] == form.text[..] {
                true
            } else {
                // Only a case difference within two bytes of a `%` can
                // still match: cheap to rule out first.
                haystack[at..end].eq_ignore_ascii_case(&form.text)
                    && (at..end)
                        .zip(&form.text)
                        .all(|(i, &expected)| same_byte(i, expected))
            };
            if same {
                found.push((index, at, end));
            } else if let Some(escape) = escaped_inside {
                if let Some(end) = match_escaped(haystack, at, form, escape) {
                    found.push((index, at, end));
                }
            }
        }
    }
    found
}

/// Whether the byte at `at` is one of the two hex digits of a percent
/// escape, whose case a host may change.
fn after_percent(view: &[u8], at: usize) -> bool {
    view.get(at).is_some_and(u8::is_ascii_hexdigit)
        && ((at >= 1 && view[at - 1] == b'%')
            || (at >= 2 && view[at - 2] == b'%' && view[at - 1].is_ascii_hexdigit()))
}

/// Where `form` ends if it starts at `at` in `view`, each of its bytes
/// after the first as itself or as an escape of `kind` standing for it.
fn match_escaped(view: &[u8], at: usize, form: &Form, kind: Escape) -> Option<usize> {
    let same = |a: &[u8], b: &[u8], loose: bool| {
        if form.ignore_case || loose {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    let text = &form.text;
    if !same(
        view.get(at..at + 1)?,
        text.get(..1)?,
        after_percent(view, at),
    ) {
        return None;
    }
    let (mut in_view, mut in_text) = (at + 1, 1);
    while in_text < text.len() {
        let rest = view.get(in_view..).filter(|rest| !rest.is_empty())?;
        let (decoded, used) = decode_escape(rest, kind);
        let mut utf8 = [0u8; 4];
        let decoded: &[u8] = match decoded {
            Decoded::Byte(byte) => {
                utf8[0] = byte;
                &utf8[..1]
            }
            Decoded::Char(c) => c.encode_utf8(&mut utf8).as_bytes(),
        };
        let loose = used == 1 && after_percent(view, in_view);
        if !same(text.get(in_text..in_text + decoded.len())?, decoded, loose) {
            return None;
        }
        in_view += used;
        in_text += decoded.len();
    }
    Some(in_view)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &str = "tok/en+Value?&=1";
    const HANDLE: &str = "secret:T:00";

    fn redacted(body: &[u8], cut: bool) -> String {
        let needles = [Needle {
            value: VALUE.as_bytes(),
            handle: HANDLE,
        }];
        String::from_utf8_lossy(&redact(body, &needles, cut)).into_owned()
    }

    fn percent(bytes: &[u8], upper: bool, all: bool) -> String {
        bytes
            .iter()
            .map(|&b| {
                if !all && b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else if upper {
                    format!("%{b:02X}")
                } else {
                    format!("%{b:02x}")
                }
            })
            .collect()
    }

    #[test]
    fn every_encoding_of_the_value_becomes_the_handle() {
        use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        let value = VALUE.as_bytes();
        let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
        let mut encodings = vec![
            VALUE.to_owned(),
            serde_json::to_string(VALUE).unwrap(),
            VALUE.replace('/', "\\/"),
            VALUE
                .chars()
                .map(|c| format!("\\u{:04x}", c as u32))
                .collect(),
            percent(value, true, false),
            percent(value, false, false),
            percent(value, true, true),
            percent(value, false, true),
            hex.clone(),
            hex.to_uppercase(),
            STANDARD.encode(value),
            STANDARD_NO_PAD.encode(value),
            URL_SAFE_NO_PAD.encode(value),
            base64::engine::general_purpose::URL_SAFE.encode(value),
        ];
        // Inside a longer base64 text, at each alignment, and wrapped.
        for prefix in ["", "a", "ab", "abc"] {
            let mut data = format!("Authorization: Bearer {prefix}").into_bytes();
            data.extend_from_slice(value);
            data.extend_from_slice(b" and more");
            encodings.push(STANDARD.encode(&data));
            encodings.push(URL_SAFE_NO_PAD.encode(&data));
            let wrapped = STANDARD.encode(&data);
            let (a, b) = wrapped.split_at(wrapped.len() / 2);
            encodings.push(format!("{a}\r\n{b}"));
        }
        encodings.push(percent(STANDARD.encode(value).as_bytes(), true, true));
        for encoded in encodings {
            let body = format!(r#"{{"echo": "{encoded}"}}"#);
            let out = redacted(body.as_bytes(), false);
            assert!(out.contains(HANDLE), "{encoded} -> {out}");
            assert!(!out.contains(&encoded), "{encoded} -> {out}");
            for probe in [
                STANDARD.encode(value),
                hex.clone(),
                VALUE.to_owned(),
                percent(value, true, false),
            ] {
                assert!(!out.contains(&probe[..8]), "{encoded} -> {out}");
            }
        }
    }

    #[test]
    fn everything_else_is_left_as_it_is() {
        let body = "plain text, %41 %zz \\u00e9 \\q 0123abcd YWJj== é";
        assert_eq!(redacted(body.as_bytes(), false), body);
        assert_eq!(redacted(b"", true), "");
        let needles = [Needle {
            value: b"",
            handle: HANDLE,
        }];
        assert_eq!(redact(b"abc", &needles, false), b"abc");
    }

    #[test]
    fn a_short_value_is_redacted_as_written_only() {
        let needles = [Needle {
            value: b"ab",
            handle: "H",
        }];
        assert_eq!(redact(b"xab 6162 YWI=", &needles, false), b"xH 6162 YWI=");
    }

    #[test]
    fn a_cut_body_loses_a_tail_that_starts_a_form() {
        use base64::engine::general_purpose::STANDARD;
        let value = VALUE.as_bytes();
        let hex: String = value.iter().map(|b| format!("{b:02X}")).collect();
        for tail in [
            VALUE[..5].to_owned(),
            hex[..7].to_owned(),
            STANDARD.encode(value)[..9].to_owned(),
            percent(&value[..4], false, true),
            format!("{}%2", &VALUE[..3]),
            format!("{}\\u00", &VALUE[..3]),
            format!("{}%", &VALUE[..3]),
        ] {
            let body = format!("kept: {tail}");
            assert_eq!(redacted(body.as_bytes(), true), "kept: ", "{tail}");
            assert_eq!(redacted(body.as_bytes(), false), body, "{tail}");
        }
    }

    #[test]
    fn a_percent_sign_before_an_escaped_echo_does_not_hide_the_value() {
        // Review finding: the sandbox chooses the rest of a header value
        // around a handle (`X-Echo: %<handle>`), and a host that echoes
        // headers as JSON escaping `/` (PHP's json_encode) or `"` gives
        // back `%ab3F\/...`. The raw view misses the value (the escape
        // is inside it) and the unescaped view decodes `%ab` as one byte,
        // eating its first two characters: all of it leaves.
        let value = "ab3F/xyz+Token9";
        let needles = [Needle {
            value: value.as_bytes(),
            handle: HANDLE,
        }];
        for echoed in [r#"%ab3F\/xyz+Token9"#, r#"%AB3F\/xyz+Token9"#] {
            let body = format!(r#"{{"headers": {{"X-Echo": "{echoed}"}}}}"#);
            let out =
                String::from_utf8_lossy(&redact(body.as_bytes(), &needles, false)).into_owned();
            assert!(!out.contains("xyz+Token9"), "{body} -> {out}");
        }
    }

    #[test]
    fn a_json_escape_before_a_percent_encoded_echo_does_not_hide_the_value() {
        // The mirror of the above: `\u00` put before a handle whose value a
        // host echoes percent-encoded (`/` and `+` as in a query) would,
        // decoded in one pass, become `\u00ab` and eat `ab`.
        let value = "ab3F/xyz+Token9";
        let needles = [Needle {
            value: value.as_bytes(),
            handle: HANDLE,
        }];
        for echoed in [r#"\u00ab3F%2Fxyz%2BToken9"#, r#"\u00ab3F%2fxyz%2bToken9"#] {
            let body = format!("echo: {echoed}");
            let out =
                String::from_utf8_lossy(&redact(body.as_bytes(), &needles, false)).into_owned();
            assert!(!out.contains("Token9"), "{body} -> {out}");
            assert!(out.contains(HANDLE), "{body} -> {out}");
        }
    }

    #[test]
    fn an_escape_before_a_value_holding_both_kinds_does_not_hide_it() {
        // A query echoed in JSON: the host percent-encodes `+` and leaves
        // `/`, which JSON then escapes; the `%` or `\u00` the payload put
        // before the handle swallows `ab` in every order of decoding.
        let value = "ab3F/xyz+Token9";
        let needles = [Needle {
            value: value.as_bytes(),
            handle: HANDLE,
        }];
        for echoed in [
            r#"%ab3F\/xyz%2BToken9"#,
            r#"%AB3F\/xyz%2bToken9"#,
            r#"\u00ab3F\/xyz%2BToken9"#,
        ] {
            let body = format!(r#"{{"url": "https:\/\/h\/?q={echoed}"}}"#);
            let out =
                String::from_utf8_lossy(&redact(body.as_bytes(), &needles, false)).into_owned();
            assert!(!out.contains("Token9"), "{body} -> {out}");
            assert!(out.contains(HANDLE), "{body} -> {out}");
        }
    }

    #[test]
    fn a_body_ending_inside_an_escaped_value_is_kept_without_a_panic() {
        for body in ["tok%2Fen%2BValue%3F%26", "tok\\/en\\u002bValue?&"] {
            assert_eq!(redacted(body.as_bytes(), false), body);
        }
    }

    #[test]
    fn base64_cores_hold_only_the_values_bits() {
        // "abcd" is YWJjZA==: the A holds the last two bits of d and four
        // of whatever follows.
        assert_eq!(base64_core(b"abcd", 0), (b"YWJjZ".to_vec(), 0, 1));
        let (core, left, right) = base64_core(b"abcd", 1);
        assert_eq!((core.len(), left, right), (4, 1, 1));
        let (core, left, right) = base64_core(b"abcd", 2);
        assert_eq!((core.len(), left, right), (5, 1, 0));
    }
}
