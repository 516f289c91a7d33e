//! Compiling a schema: every keyword checked for its form and turned into
//! a [`Checks`], references registered once each and bounded, `pattern`
//! given its ECMA-262 meaning.

use std::collections::HashMap;

use std::fmt::Write as _;

use serde_json::{Number, Value};

use super::super::schema_pointer::{local_pointer, resolve_pointer};
use super::{
    Checks, Node, Pattern, Reference, SchemaError, Type, ANNOTATIONS, DIALECTS, MAX_MULTIPLE_OF,
    MAX_REFERENCES, MAX_SCHEMA_DEPTH, SUPPORTED,
};

/// What compiling a schema keeps track of besides the node it builds.
pub(super) struct Compiler<'a> {
    /// The whole schema, which `$ref` pointers are resolved in.
    pub(super) document: &'a Value,
    /// JSON pointer (as written by [`push_pointer`]) to target index.
    pub(super) indexes: HashMap<String, usize>,
    /// Targets registered but not compiled yet, with their pointer.
    pub(super) pending: Vec<(usize, String)>,
    /// Schemas being compiled inside each other right now.
    pub(super) depth: usize,
}

impl Compiler<'_> {
    pub(super) fn node(
        &mut self,
        schema: &Value,
        location: &mut String,
    ) -> Result<Node, SchemaError> {
        if self.depth >= MAX_SCHEMA_DEPTH {
            return Err(schema_error(
                location,
                format!("schemas nest deeper than {MAX_SCHEMA_DEPTH} levels"),
            ));
        }
        self.depth += 1;
        let node = Node::compile(schema, location, self);
        self.depth -= 1;
        node
    }

    /// The index of the target at `pointer`, registered to be compiled
    /// once if it is new.
    pub(super) fn register(&mut self, pointer: &str, location: &str) -> Result<usize, SchemaError> {
        if let Some(index) = self.indexes.get(pointer) {
            return Ok(*index);
        }
        if self.indexes.len() >= MAX_REFERENCES {
            return Err(schema_error(
                location,
                format!("more than {MAX_REFERENCES} $ref targets and $defs entries"),
            ));
        }
        let index = self.indexes.len();
        self.indexes.insert(pointer.to_string(), index);
        self.pending.push((index, pointer.to_string()));
        Ok(index)
    }

    /// A target that is nothing but a `$ref`, whose chain comes back to
    /// itself, checks nothing and would recurse forever: refuse it here.
    pub(super) fn refuse_reference_loops(&self) -> Result<(), SchemaError> {
        for start in self.indexes.keys() {
            let mut seen = std::collections::HashSet::new();
            let mut pointer = start.clone();
            while let Some(next) =
                resolve_pointer(self.document, &pointer).and_then(only_a_reference)
            {
                if !seen.insert(pointer.clone()) {
                    return Err(schema_error(
                        start,
                        "this $ref leads back to itself through references that check nothing"
                            .into(),
                    ));
                }
                match local_pointer(next) {
                    Ok(target) => pointer = target,
                    Err(_) => break,
                }
            }
        }
        Ok(())
    }
}

/// The `$ref` of a schema that has no other keyword but annotations.
fn only_a_reference(schema: &Value) -> Option<&str> {
    let object = schema.as_object()?;
    let reference = object.get("$ref")?.as_str()?;
    object
        .keys()
        .all(|k| k == "$ref" || ANNOTATIONS.contains(&k.as_str()))
        .then_some(reference)
}

pub(super) fn push_pointer(pointer: &mut String, token: &str) {
    pointer.push('/');
    for c in token.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

/// Run `f` with `token` appended to `pointer`, then take it off again.
pub(super) fn at<T>(pointer: &mut String, token: &str, f: impl FnOnce(&mut String) -> T) -> T {
    let len = pointer.len();
    push_pointer(pointer, token);
    let result = f(pointer);
    pointer.truncate(len);
    result
}

pub(super) fn schema_error(location: &str, message: String) -> SchemaError {
    SchemaError {
        location: location.to_string(),
        message,
    }
}

pub(super) fn count(value: &Value, keyword: &str, location: &str) -> Result<u64, SchemaError> {
    value.as_u64().ok_or_else(|| {
        schema_error(
            location,
            format!("{keyword} must be a whole number of at least 0, not {value}"),
        )
    })
}

pub(super) fn number(value: &Value, keyword: &str, location: &str) -> Result<Number, SchemaError> {
    match value {
        Value::Number(n) => Ok(n.clone()),
        other => Err(schema_error(
            location,
            format!("{keyword} must be a number, not {other}"),
        )),
    }
}

pub(super) fn subschemas(
    value: &Value,
    keyword: &str,
    location: &mut String,
    cx: &mut Compiler,
) -> Result<Vec<Node>, SchemaError> {
    let Value::Array(list) = value else {
        return Err(schema_error(
            location,
            format!("{keyword} must be a non-empty array of schemas"),
        ));
    };
    if list.is_empty() {
        return Err(schema_error(
            location,
            format!("{keyword} must be a non-empty array of schemas"),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, s)| at(location, &i.to_string(), |l| cx.node(s, l)))
        .collect()
}

impl Node {
    pub(super) fn compile(
        schema: &Value,
        location: &mut String,
        cx: &mut Compiler,
    ) -> Result<Node, SchemaError> {
        let object = match schema {
            Value::Bool(b) => return Ok(Node::Always(*b)),
            Value::Object(object) => object,
            other => {
                return Err(schema_error(
                    location,
                    format!("a schema must be an object or true/false, not {other}"),
                ))
            }
        };
        let mut checks = Checks::default();
        for (keyword, value) in object {
            at(location, keyword, |l| checks.add(keyword, value, l, cx))?;
        }
        Ok(Node::Checks(Box::new(checks)))
    }
}

impl Checks {
    pub(super) fn add(
        &mut self,
        keyword: &str,
        value: &Value,
        location: &mut String,
        cx: &mut Compiler,
    ) -> Result<(), SchemaError> {
        let l = location.as_str();
        match keyword {
            "type" => {
                let names: Vec<&Value> = match value {
                    Value::Array(list) if !list.is_empty() => list.iter().collect(),
                    Value::String(_) => vec![value],
                    _ => {
                        return Err(schema_error(
                            l,
                            format!(
                                "type must be a type name or a non-empty list of them, not {value}"
                            ),
                        ))
                    }
                };
                let mut types = Vec::new();
                for name in names {
                    let found = Type::NAMES
                        .iter()
                        .find(|(n, _)| name.as_str() == Some(n))
                        .map(|(_, t)| *t);
                    match found {
                        Some(t) => types.push(t),
                        None => {
                            let valid: Vec<&str> = Type::NAMES.iter().map(|(n, _)| *n).collect();
                            return Err(schema_error(
                                l,
                                format!("type {name} is not one of {}", valid.join(", ")),
                            ));
                        }
                    }
                }
                self.types = Some(types);
            }
            "enum" => match value {
                Value::Array(list) if !list.is_empty() => self.one_of_values = Some(list.clone()),
                _ => {
                    return Err(schema_error(
                        l,
                        format!("enum must be a non-empty array of values, not {value}"),
                    ))
                }
            },
            "const" => self.constant = Some(value.clone()),
            "properties" => {
                let Value::Object(properties) = value else {
                    return Err(schema_error(
                        l,
                        format!("properties must map names to schemas, not {value}"),
                    ));
                };
                for (name, schema) in properties {
                    let node = at(location, name, |l| cx.node(schema, l))?;
                    self.properties.push((name.clone(), node));
                }
            }
            "required" => {
                let names = value.as_array().and_then(|list| {
                    list.iter()
                        .map(|n| n.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                });
                match names {
                    Some(names) => self.required = names,
                    None => {
                        return Err(schema_error(
                            l,
                            format!("required must be an array of property names, not {value}"),
                        ))
                    }
                }
            }
            "additionalProperties" => self.additional_properties = Some(cx.node(value, location)?),
            "minProperties" => self.min_properties = Some(count(value, keyword, l)?),
            "maxProperties" => self.max_properties = Some(count(value, keyword, l)?),
            "items" => {
                if value.is_array() {
                    return Err(schema_error(
                        l,
                        "items must be one schema for every item; a list of schemas per \
                         position (draft 7 tuples, 2020-12 prefixItems) is not supported"
                            .into(),
                    ));
                }
                self.items = Some(cx.node(value, location)?)
            }
            "minItems" => self.min_items = Some(count(value, keyword, l)?),
            "maxItems" => self.max_items = Some(count(value, keyword, l)?),
            "uniqueItems" => match value {
                Value::Bool(b) => self.unique_items = *b,
                _ => {
                    return Err(schema_error(
                        l,
                        format!("uniqueItems must be true or false, not {value}"),
                    ))
                }
            },
            "minLength" => self.min_length = Some(count(value, keyword, l)?),
            "maxLength" => self.max_length = Some(count(value, keyword, l)?),
            "pattern" => {
                let Some(source) = value.as_str() else {
                    return Err(schema_error(
                        l,
                        format!("pattern must be a string, not {value}"),
                    ));
                };
                let translated = ecma_meaning(source)
                    .map_err(|message| schema_error(l, format!("pattern {source:?}: {message}")))?;
                let regex = regex_lite::Regex::new(&translated).map_err(|e| {
                    schema_error(
                        l,
                        format!(
                            "pattern {source:?} is not a supported regular expression \
                             (no look-around, back-references or \\p classes): {e}"
                        ),
                    )
                })?;
                self.pattern = Some(Pattern {
                    source: source.to_string(),
                    regex,
                });
            }
            "minimum" => self.minimum = Some(number(value, keyword, l)?),
            "maximum" => self.maximum = Some(number(value, keyword, l)?),
            "exclusiveMinimum" => self.exclusive_minimum = Some(number(value, keyword, l)?),
            "exclusiveMaximum" => self.exclusive_maximum = Some(number(value, keyword, l)?),
            "multipleOf" => match value.as_u64() {
                Some(m) if (1..=MAX_MULTIPLE_OF).contains(&m) => self.multiple_of = Some(m),
                _ => {
                    return Err(schema_error(
                        l,
                        format!(
                            "multipleOf must be a whole number from 1 to 2^53, not {value} \
                             (a fraction such as 0.1 has no exact binary value to divide by)"
                        ),
                    ))
                }
            },
            "allOf" => self.all_of = subschemas(value, keyword, location, cx)?,
            "anyOf" => self.any_of = subschemas(value, keyword, location, cx)?,
            "oneOf" => self.one_of = subschemas(value, keyword, location, cx)?,
            "not" => self.not = Some(cx.node(value, location)?),
            "$ref" => {
                let Some(text) = value.as_str() else {
                    return Err(schema_error(
                        l,
                        format!("$ref must be a string, not {value}"),
                    ));
                };
                let pointer = local_pointer(text).map_err(|message| schema_error(l, message))?;
                if resolve_pointer(cx.document, &pointer).is_none() {
                    return Err(schema_error(
                        l,
                        format!("$ref {text:?} points at nothing in this schema"),
                    ));
                }
                let index = cx.register(&pointer, l)?;
                self.reference = Some(Reference { index });
            }
            // Each entry compiled once, named or not, so that a mistake in
            // one is found when the skill loads rather than never.
            "$defs" | "definitions" => {
                let Value::Object(definitions) = value else {
                    return Err(schema_error(
                        l,
                        format!("{keyword} must map names to schemas, not {value}"),
                    ));
                };
                for name in definitions.keys() {
                    let mut pointer = location.clone();
                    push_pointer(&mut pointer, name);
                    cx.register(&pointer, l)?;
                }
            }
            "$schema" => {
                if !value.as_str().is_some_and(|s| DIALECTS.contains(&s)) {
                    return Err(schema_error(
                        l,
                        format!(
                            "$schema {value} is not a dialect this check implements; use one of {}",
                            DIALECTS.join(", ")
                        ),
                    ));
                }
            }
            _ if ANNOTATIONS.contains(&keyword) => {}
            _ => {
                return Err(schema_error(
                    l,
                    format!(
                        "keyword {keyword:?} is not supported, and ignoring it would accept \
                         params the schema means to refuse; use only {} (and the annotations {})",
                        SUPPORTED.join(", "),
                        ANNOTATIONS.join(", ")
                    ),
                ))
            }
        }
        Ok(())
    }
}

/// ECMA-262 line terminators and white space: what `.` excludes and `\s`
/// matches in a JSON Schema pattern.
const ECMA_LINE_TERMINATORS: &str = r"\n\r\x{2028}\x{2029}";

const ECMA_SPACE: &str =
    r"\t\n\x0B\f\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}";
/// Rewrite `.`, `\s` and `\S` to their ECMA-262 meaning for regex-lite.
pub(super) fn ecma_meaning(pattern: &str) -> Result<String, String> {
    let mut out = String::with_capacity(pattern.len());
    let mut in_class = false;
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('s') if in_class => out.push_str(ECMA_SPACE),
                Some('s') => {
                    let _ = write!(out, "[{ECMA_SPACE}]");
                }
                Some('S') if in_class => {
                    return Err("\\S inside a character class is not supported; \
                                write the class without it or use [^\\s...]"
                        .into())
                }
                Some('S') => {
                    let _ = write!(out, "[^{ECMA_SPACE}]");
                }
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => return Err("ends with a lone backslash".into()),
            },
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                // A `]` right after `[` or `[^` is a literal in regex-lite
                // and an empty class in ECMA-262: refuse the difference.
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    return Err("an empty class [] or [^] is not supported".into());
                }
            }
            '[' => {
                return Err("a [ inside a character class must be escaped as \\[".into());
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '.' if !in_class => {
                let _ = write!(out, "[^{ECMA_LINE_TERMINATORS}]");
            }
            '(' if !in_class && chars.peek() == Some(&'?') => {
                // Inline flags ((?s), (?i), ...) are not ECMA-262; look-around
                // is refused by regex-lite itself.
                out.push('(');
                let mut ahead = chars.clone();
                ahead.next();
                if ahead.peek() != Some(&':') {
                    return Err("only (?:...) groups are supported: no inline flags, \
                                look-around or named groups"
                        .into());
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}
