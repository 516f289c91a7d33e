//! Local `$ref`s of a skill's parameter schema: the JSON pointer a reference
//! names (RFC 6901, in a URI fragment, RFC 3986 percent-encoding) and the
//! value it points at. Anything that would fetch another document is refused.

use serde_json::Value;

/// The JSON pointer a local `$ref` names, escaped as a schema location is
/// (`~0`, `~1`), so that it compares equal to one.
pub(super) fn local_pointer(reference: &str) -> Result<String, String> {
    let Some(fragment) = reference.strip_prefix('#') else {
        return Err(format!(
            "$ref {reference:?} names another document; only references inside this \
             schema (\"#/$defs/NAME\", \"#/definitions/NAME\") are supported"
        ));
    };
    let fragment = percent_decode(fragment)
        .ok_or_else(|| format!("$ref {reference:?} is not valid percent-encoding"))?;
    if !fragment.is_empty() && !fragment.starts_with('/') {
        return Err(format!(
            "$ref {reference:?} names an anchor; refer by JSON pointer (\"#/$defs/NAME\")"
        ));
    }
    let mut chars = fragment.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!(
                "$ref {reference:?}: `~` in a JSON pointer must be `~0` or `~1`"
            ));
        }
    }
    Ok(fragment)
}

/// `%XX` escapes decoded; `None` when malformed or not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The value at a JSON pointer (`/a/0/b~1c`) in `document`.
pub(super) fn resolve_pointer<'a>(document: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() {
        return Some(document);
    }
    let mut value = document;
    for token in pointer.strip_prefix('/')?.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        value = match value {
            Value::Object(object) => object.get(&token)?,
            Value::Array(items) => items.get(array_index(&token)?)?,
            _ => return None,
        };
    }
    Some(value)
}

/// RFC 6901's array index: `0` or digits without a leading zero (Rust's
/// own parse would take `+1` and `01` too).
fn array_index(token: &str) -> Option<usize> {
    let canonical = token == "0"
        || (!token.starts_with('0')
            && !token.is_empty()
            && token.bytes().all(|b| b.is_ascii_digit()));
    canonical.then(|| token.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_decode_and_resolve() {
        assert_eq!(local_pointer("#").unwrap(), "");
        assert_eq!(local_pointer("#/$defs/A").unwrap(), "/$defs/A");
        assert_eq!(local_pointer("#/%24defs/A%20B").unwrap(), "/$defs/A B");
        assert!(local_pointer("#/a~2").is_err());
        assert!(local_pointer("#/%e2%28").is_err());
        assert!(local_pointer("#/%4").is_err());
        assert!(local_pointer("#name").unwrap_err().contains("anchor"));
        assert!(local_pointer("/abs")
            .unwrap_err()
            .contains("another document"));
        let document = json!({"a/b": {"c~d": [1, {"e": 2}]}});
        assert_eq!(resolve_pointer(&document, ""), Some(&document));
        assert_eq!(
            resolve_pointer(&document, "/a~1b/c~0d/1/e"),
            Some(&json!(2))
        );
        assert_eq!(resolve_pointer(&document, "/a~1b/c~0d/2"), None);
        assert_eq!(resolve_pointer(&document, "/a~1b/c~0d/+1"), None);
        assert_eq!(resolve_pointer(&document, "/a~1b/c~0d/01"), None);
        assert_eq!(resolve_pointer(&document, "/a~1b/c~0d/0"), Some(&json!(1)));
        assert_eq!(resolve_pointer(&document, "nope"), None);
    }
}
