//! The part of JSON Schema (2020-12) a skill's `input-schema` may use, and
//! the check of an invocation's params against it.
//!
//! A schema is compiled once, when the manifest loads. Every keyword it
//! uses must be one of [`SUPPORTED`] or a pure annotation ([`ANNOTATIONS`]);
//! anything else (`if`, `patternProperties`, `prefixItems`, ...) refuses
//! the manifest, naming the keyword and where it sits. A keyword that was
//! silently skipped would let through params the skill's author meant to
//! refuse, so a schema is either checked in full or not loaded.
//!
//! What pydantic's `model_json_schema()` and zod's converters emit works:
//! `format` is an annotation (as 2020-12 says by default: the skill's own
//! model checks it), and `$ref` may point anywhere inside the schema by
//! JSON pointer (`#/$defs/NAME`, draft 7's `#/definitions/NAME`, zod's
//! `#/definitions/T/properties/home`, `#` for the root). A manifest is
//! untrusted input, so references are bounded: each target is compiled
//! once however often it is named (no exponential copies), at most
//! [`MAX_REFERENCES`] of them, a schema nests at most [`MAX_SCHEMA_DEPTH`]
//! deep, a chain of references that never reaches a check refuses the
//! manifest, and a check of params follows at most [`MAX_CHECK_DEPTH`]
//! nested schemas and [`MAX_CHECK_STEPS`] in all (a recursive schema such
//! as `{"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}` doubles its work at
//! every level), refusing the params beyond that rather than passing them.
//!
//! `pattern` is a regular expression in the `regex-lite` crate's syntax
//! (classes, repetition, anchors, groups; no look-around, back-references
//! or `\p{..}`, which refuse the manifest), matched anywhere in the string
//! as JSON Schema says. `\d` and `\w` are ASCII as in JSON Schema's
//! ECMA-262 dialect; `\s` and `.` are given ECMA-262's meaning (Unicode
//! spaces; anything but a line terminator), since the crate's own narrower
//! meaning would make `^\S+$` accept a no-break space.

use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

use super::schema_pointer::{local_pointer, resolve_pointer};
use crate::broker::prompt;

/// Keywords that constrain the params.
pub const SUPPORTED: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "minProperties",
    "maxProperties",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "$ref",
    "$defs",
    "definitions",
];

/// Keywords that describe and never constrain.
pub const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    // An annotation in 2020-12 unless a dialect asks for the format-assertion
    // vocabulary; generators emit it for every date, UUID and e-mail field.
    "format",
    // OpenAPI's hint at which `oneOf` branch applies (pydantic emits it for
    // discriminated unions); `oneOf` itself does the checking.
    "discriminator",
];

/// Most references (distinct `$ref` targets and `$defs` entries) a schema may have.
pub const MAX_REFERENCES: usize = 1024;
/// Deepest nesting of schemas inside a schema (pydantic and zod output
/// nests a few levels per model; references do not add to it).
pub const MAX_SCHEMA_DEPTH: usize = 64;
/// Deepest nesting of schemas one check follows, references included:
/// recursion stays far from a thread's stack limit.
pub const MAX_CHECK_DEPTH: usize = 256;
/// Most schemas one check of params visits, references included.
pub const MAX_CHECK_STEPS: u64 = 1_000_000;

/// `$schema` values whose meaning for the supported keywords is the one
/// implemented here (draft 4's boolean `exclusiveMinimum` is refused by
/// its type, so drafts 6 onwards).
const DIALECTS: &[&str] = &[
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-06/schema",
];

/// Why a schema cannot be used: where in the schema, and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if location.is_empty() { String::new() } else { format!("at {location}: ") })]
pub struct SchemaError {
    /// JSON pointer into the schema (`/properties/path/type`); empty for
    /// the schema itself.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

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

/// Where params fail their schema and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into the params (`/path`); empty for the params
    /// themselves.
    pub field: String,
    /// What the schema wants.
    pub message: String,
}

/// A compiled `input-schema`.
#[derive(Debug, Clone)]
pub struct ParamsSchema {
    root: Node,
    /// What each `$ref` and `$defs` entry points at, by [`Reference::index`].
    targets: Vec<Node>,
}

impl ParamsSchema {
    /// Compile `schema`, refusing any keyword that is not implemented.
    pub fn compile(schema: &Value) -> Result<ParamsSchema, SchemaError> {
        let mut compiler = Compiler {
            document: schema,
            indexes: HashMap::new(),
            pending: Vec::new(),
            depth: 0,
        };
        let root = compiler.node(schema, &mut String::new())?;
        let mut targets: Vec<Option<Node>> = Vec::new();
        // Targets compile one after another, not inside each other: a
        // chain of references adds no recursion.
        while let Some((index, pointer)) = compiler.pending.pop() {
            let Some(target) = resolve_pointer(schema, &pointer) else {
                return Err(schema_error(&pointer, "nothing is here".into()));
            };
            let node = compiler.node(target, &mut pointer.clone())?;
            if targets.len() <= index {
                targets.resize_with(index + 1, || None);
            }
            targets[index] = Some(node);
        }
        compiler.refuse_reference_loops()?;
        Ok(ParamsSchema {
            root,
            // Every registered index was pending once, so each is filled.
            targets: targets
                .into_iter()
                .map(|t| t.unwrap_or(Node::Always(false)))
                .collect(),
        })
    }

    /// The first place `params` break the schema, if any.
    pub fn check(&self, params: &Value) -> Result<(), Violation> {
        let walk = Walk {
            targets: &self.targets,
            steps: Cell::new(0),
            exhausted: Cell::new(false),
        };
        let mut field = String::new();
        let found = self.root.first_violation(params, &mut field, &walk, 0);
        // A bound reached anywhere (under `not` too, where a failure would
        // read as a pass) refuses the params: never checked means not passed.
        if walk.exhausted.get() {
            return Err(Violation {
                field: String::new(),
                message: format!(
                    "the schema's references recurse too far to check these params \
                     (more than {MAX_CHECK_DEPTH} nested schemas or {MAX_CHECK_STEPS} steps)"
                ),
            });
        }
        match found {
            None => Ok(()),
            Some(message) => Err(Violation { field, message }),
        }
    }
}

/// What compiling a schema keeps track of besides the node it builds.
struct Compiler<'a> {
    /// The whole schema, which `$ref` pointers are resolved in.
    document: &'a Value,
    /// JSON pointer (as written by [`push_pointer`]) to target index.
    indexes: HashMap<String, usize>,
    /// Targets registered but not compiled yet, with their pointer.
    pending: Vec<(usize, String)>,
    /// Schemas being compiled inside each other right now.
    depth: usize,
}

impl Compiler<'_> {
    fn node(&mut self, schema: &Value, location: &mut String) -> Result<Node, SchemaError> {
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
    fn register(&mut self, pointer: &str, location: &str) -> Result<usize, SchemaError> {
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
    fn refuse_reference_loops(&self) -> Result<(), SchemaError> {
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

/// What one check of params carries down the schema.
struct Walk<'a> {
    targets: &'a [Node],
    steps: Cell<u64>,
    /// A bound was reached: the params are refused whatever else was found.
    exhausted: Cell<bool>,
}

/// A `$ref`, compiled.
#[derive(Debug, Clone)]
struct Reference {
    index: usize,
}

#[derive(Debug, Clone)]
enum Node {
    /// `true` or `false` as a schema.
    Always(bool),
    Checks(Box<Checks>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Null,
    Boolean,
    Object,
    Array,
    Number,
    Integer,
    String,
}

impl Type {
    const NAMES: &'static [(&'static str, Type)] = &[
        ("null", Type::Null),
        ("boolean", Type::Boolean),
        ("object", Type::Object),
        ("array", Type::Array),
        ("number", Type::Number),
        ("integer", Type::Integer),
        ("string", Type::String),
    ];

    fn name(self) -> &'static str {
        Type::NAMES
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("?", |(name, _)| name)
    }

    fn admits(self, value: &Value) -> bool {
        match (self, value) {
            (Type::Null, Value::Null)
            | (Type::Boolean, Value::Bool(_))
            | (Type::Object, Value::Object(_))
            | (Type::Array, Value::Array(_))
            | (Type::Number, Value::Number(_))
            | (Type::String, Value::String(_)) => true,
            // 2020-12: 1.0 is an integer.
            (Type::Integer, Value::Number(n)) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            _ => false,
        }
    }
}

#[derive(Debug, Clone)]
struct Pattern {
    source: String,
    regex: regex_lite::Regex,
}

#[derive(Debug, Clone, Default)]
struct Checks {
    types: Option<Vec<Type>>,
    one_of_values: Option<Vec<Value>>,
    constant: Option<Value>,
    properties: Vec<(String, Node)>,
    required: Vec<String>,
    additional_properties: Option<Node>,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    items: Option<Node>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    unique_items: bool,
    min_length: Option<u64>,
    max_length: Option<u64>,
    pattern: Option<Pattern>,
    minimum: Option<Number>,
    maximum: Option<Number>,
    exclusive_minimum: Option<Number>,
    exclusive_maximum: Option<Number>,
    multiple_of: Option<u64>,
    all_of: Vec<Node>,
    any_of: Vec<Node>,
    one_of: Vec<Node>,
    not: Option<Node>,
    reference: Option<Reference>,
}

/// Largest `multipleOf`: every whole number up to 2^53 is exact as a
/// double, so the remainder of a fractional value is exact too.
const MAX_MULTIPLE_OF: u64 = 1 << 53;

fn push_pointer(pointer: &mut String, token: &str) {
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
fn at<T>(pointer: &mut String, token: &str, f: impl FnOnce(&mut String) -> T) -> T {
    let len = pointer.len();
    push_pointer(pointer, token);
    let result = f(pointer);
    pointer.truncate(len);
    result
}

fn schema_error(location: &str, message: String) -> SchemaError {
    SchemaError {
        location: location.to_string(),
        message,
    }
}

fn count(value: &Value, keyword: &str, location: &str) -> Result<u64, SchemaError> {
    value.as_u64().ok_or_else(|| {
        schema_error(
            location,
            format!("{keyword} must be a whole number of at least 0, not {value}"),
        )
    })
}

fn number(value: &Value, keyword: &str, location: &str) -> Result<Number, SchemaError> {
    match value {
        Value::Number(n) => Ok(n.clone()),
        other => Err(schema_error(
            location,
            format!("{keyword} must be a number, not {other}"),
        )),
    }
}

fn subschemas(
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
    fn compile(
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

    fn first_violation(
        &self,
        value: &Value,
        field: &mut String,
        walk: &Walk,
        depth: usize,
    ) -> Option<String> {
        let steps = walk.steps.get().saturating_add(1);
        walk.steps.set(steps);
        if depth > MAX_CHECK_DEPTH || steps > MAX_CHECK_STEPS || walk.exhausted.get() {
            walk.exhausted.set(true);
            return Some("the check stopped at its bound".into());
        }
        match self {
            Node::Always(true) => None,
            Node::Always(false) => Some("no value is allowed here".into()),
            Node::Checks(checks) => checks.first_violation(value, field, walk, depth + 1),
        }
    }

    fn admits(&self, value: &Value, walk: &Walk, depth: usize) -> bool {
        self.first_violation(value, &mut String::new(), walk, depth)
            .is_none()
    }
}

impl Checks {
    fn add(
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

    fn first_violation(
        &self,
        value: &Value,
        field: &mut String,
        walk: &Walk,
        depth: usize,
    ) -> Option<String> {
        if let Some(types) = &self.types {
            if !types.iter().any(|t| t.admits(value)) {
                let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
                return Some(format!("{value} is not of type {}", names.join(" or ")));
            }
        }
        if let Some(values) = &self.one_of_values {
            if !values.iter().any(|v| json_equal(v, value)) {
                let list: Vec<String> = values.iter().map(Value::to_string).collect();
                return Some(format!("{value} is not one of {}", list.join(", ")));
            }
        }
        if let Some(constant) = &self.constant {
            if !json_equal(constant, value) {
                return Some(format!("{value} is not {constant}"));
            }
        }
        let found = match value {
            Value::Object(object) => self.object_violation(object, field, walk, depth),
            Value::Array(items) => self.array_violation(items, field, walk, depth),
            Value::String(s) => self.string_violation(s),
            Value::Number(n) => self.number_violation(n),
            Value::Null | Value::Bool(_) => None,
        };
        if found.is_some() {
            return found;
        }
        if let Some(reference) = &self.reference {
            let Some(target) = walk.targets.get(reference.index) else {
                return Some("a $ref whose target was not compiled".into());
            };
            if let Some(message) = target.first_violation(value, field, walk, depth) {
                return Some(message);
            }
        }
        for schema in &self.all_of {
            if let Some(message) = schema.first_violation(value, field, walk, depth) {
                return Some(message);
            }
        }
        if !self.any_of.is_empty() && !self.any_of.iter().any(|s| s.admits(value, walk, depth)) {
            return Some(format!("{value} matches none of the anyOf alternatives"));
        }
        if !self.one_of.is_empty() {
            let matching = self
                .one_of
                .iter()
                .filter(|s| s.admits(value, walk, depth))
                .count();
            if matching != 1 {
                return Some(format!(
                    "{value} matches {matching} of the oneOf alternatives, not exactly one"
                ));
            }
        }
        if let Some(not) = &self.not {
            if not.admits(value, walk, depth) {
                return Some(format!("{value} matches the schema under not"));
            }
        }
        None
    }

    fn object_violation(
        &self,
        object: &Map<String, Value>,
        field: &mut String,
        walk: &Walk,
        depth: usize,
    ) -> Option<String> {
        for name in &self.required {
            if !object.contains_key(name) {
                return Some(format!("{name:?} is a required property"));
            }
        }
        let len = object.len() as u64;
        if let Some(min) = self.min_properties.filter(|min| len < *min) {
            return Some(format!("has {len} properties, fewer than {min}"));
        }
        if let Some(max) = self.max_properties.filter(|max| len > *max) {
            return Some(format!("has {len} properties, more than {max}"));
        }
        for (name, value) in object {
            let declared = self.properties.iter().find(|(n, _)| n == name);
            let schema = match (declared, &self.additional_properties) {
                (Some((_, schema)), _) => schema,
                (None, Some(Node::Always(false))) => {
                    return Some(format!(
                        "property {name:?} is not allowed (additionalProperties is false)"
                    ));
                }
                (None, Some(schema)) => schema,
                (None, None) => continue,
            };
            let len_before = field.len();
            push_pointer(field, name);
            if let Some(message) = schema.first_violation(value, field, walk, depth) {
                return Some(message);
            }
            field.truncate(len_before);
        }
        None
    }

    fn array_violation(
        &self,
        items: &[Value],
        field: &mut String,
        walk: &Walk,
        depth: usize,
    ) -> Option<String> {
        let len = items.len() as u64;
        if let Some(min) = self.min_items.filter(|min| len < *min) {
            return Some(format!("has {len} items, fewer than {min}"));
        }
        if let Some(max) = self.max_items.filter(|max| len > *max) {
            return Some(format!("has {len} items, more than {max}"));
        }
        if self.unique_items {
            let mut seen = std::collections::HashMap::new();
            for (i, item) in items.iter().enumerate() {
                if let Some(first) = seen.insert(canonical(item), i) {
                    return Some(format!(
                        "items {first} and {i} are equal, and items must be unique"
                    ));
                }
            }
        }
        if let Some(schema) = &self.items {
            for (i, item) in items.iter().enumerate() {
                let len_before = field.len();
                push_pointer(field, &i.to_string());
                if let Some(message) = schema.first_violation(item, field, walk, depth) {
                    return Some(message);
                }
                field.truncate(len_before);
            }
        }
        None
    }

    fn string_violation(&self, s: &str) -> Option<String> {
        // JSON Schema counts characters (code points), not bytes.
        let len = s.chars().count() as u64;
        if let Some(min) = self.min_length.filter(|min| len < *min) {
            return Some(format!("{s:?} is shorter than {min} characters"));
        }
        if let Some(max) = self.max_length.filter(|max| len > *max) {
            return Some(format!("{s:?} is longer than {max} characters"));
        }
        if let Some(pattern) = &self.pattern {
            if !pattern.regex.is_match(s) {
                return Some(format!("{s:?} does not match {:?}", pattern.source));
            }
        }
        None
    }

    fn number_violation(&self, n: &Number) -> Option<String> {
        if let Some(min) = &self.minimum {
            if compare(n, min) == Ordering::Less {
                return Some(format!("{n} is less than the minimum of {min}"));
            }
        }
        if let Some(max) = &self.maximum {
            if compare(n, max) == Ordering::Greater {
                return Some(format!("{n} is greater than the maximum of {max}"));
            }
        }
        if let Some(min) = &self.exclusive_minimum {
            if compare(n, min) != Ordering::Greater {
                return Some(format!("{n} is not greater than {min}"));
            }
        }
        if let Some(max) = &self.exclusive_maximum {
            if compare(n, max) != Ordering::Less {
                return Some(format!("{n} is not less than {max}"));
            }
        }
        if let Some(m) = self.multiple_of {
            let multiple = if let Some(i) = integer(n) {
                i % i128::from(m) == 0
            } else {
                // Exact: fmod of doubles has no rounding, and `m` is
                // exact as a double (at most 2^53).
                n.as_f64().is_some_and(|f| f % (m as f64) == 0.0)
            };
            if !multiple {
                return Some(format!("{n} is not a multiple of {m}"));
            }
        }
        None
    }
}

fn integer(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// Compare two JSON numbers exactly: integers beyond 2^53 are not
/// rounded to doubles first, so a `maximum` of 9007199254740992 refuses
/// 9007199254740993.
fn compare(a: &Number, b: &Number) -> Ordering {
    match (integer(a), integer(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(x), None) => compare_float(b.as_f64().unwrap_or(0.0), x).reverse(),
        (None, Some(y)) => compare_float(a.as_f64().unwrap_or(0.0), y),
        (None, None) => {
            let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
    }
}

/// `f` against the integer `i`, exactly (serde_json's doubles are finite).
fn compare_float(f: f64, i: i128) -> Ordering {
    let floor = f.floor();
    // i128 spans ±1.7e38; a double beyond it is beyond every i64/u64.
    if floor >= 1.7e38 {
        return Ordering::Greater;
    }
    if floor <= -1.7e38 {
        return Ordering::Less;
    }
    let whole = floor as i128;
    match whole.cmp(&i) {
        Ordering::Equal if f > floor => Ordering::Greater,
        other => other,
    }
}

/// JSON equality: numbers by value (1 equals 1.0), objects regardless of
/// key order.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare(x, y) == Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// A text equal for exactly the values [`json_equal`] calls equal, so
/// `uniqueItems` takes linear time on a long array from a caller.
fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Number(n) => {
            let whole = integer(n).or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1.7e38)
                    .map(|f| f as i128)
            });
            match whole {
                Some(i) => {
                    let _ = write!(out, "{i}");
                }
                None => {
                    let _ = write!(out, "{n}");
                }
            }
        }
        Value::Array(items) => {
            out.push('[');
            for item in items {
                write_canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(object) => {
            let mut entries: Vec<_> = object.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (key, item) in entries {
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
                out.push(',');
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// ECMA-262 line terminators and white space: what `.` excludes and `\s`
/// matches in a JSON Schema pattern.
const ECMA_LINE_TERMINATORS: &str = r"\n\r\x{2028}\x{2029}";
const ECMA_SPACE: &str =
    r"\t\n\x0B\f\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}";

/// Rewrite `.`, `\s` and `\S` to their ECMA-262 meaning for regex-lite.
fn ecma_meaning(pattern: &str) -> Result<String, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compile(schema: Value) -> ParamsSchema {
        ParamsSchema::compile(&schema).unwrap_or_else(|e| panic!("{schema}: {e}"))
    }

    fn refused(schema: Value) -> SchemaError {
        match ParamsSchema::compile(&schema) {
            Ok(_) => panic!("{schema} compiled"),
            Err(e) => e,
        }
    }

    fn violation(schema: &ParamsSchema, params: Value) -> Violation {
        match schema.check(&params) {
            Ok(()) => panic!("{params} passed"),
            Err(v) => v,
        }
    }

    #[test]
    fn unimplemented_keywords_refuse_the_schema_naming_where() {
        for keyword in [
            "if",
            "then",
            "patternProperties",
            "propertyNames",
            "dependentRequired",
            "prefixItems",
            "contains",
            "unevaluatedProperties",
            "maxContains",
            "contentMediaType",
            "typo",
        ] {
            let mut inner = Map::new();
            inner.insert(keyword.to_string(), json!("x"));
            let err = refused(json!({"properties": {"a/b": inner}}));
            assert_eq!(
                err.location,
                format!("/properties/a~1b/{}", keyword.replace('/', "~1"))
            );
            assert!(
                err.message
                    .contains(&format!("{keyword:?} is not supported")),
                "{err}"
            );
        }
        let err = refused(json!({"items": [{"type": "string"}]}));
        assert_eq!(err.location, "/items");
        let err = refused(json!({"$schema": "http://json-schema.org/draft-04/schema#"}));
        assert!(err.message.contains("not a dialect"), "{err}");
    }

    #[test]
    fn malformed_keyword_values_refuse_the_schema() {
        for schema in [
            json!({"type": 12}),
            json!({"type": "text"}),
            json!({"type": []}),
            json!({"enum": []}),
            json!({"required": "path"}),
            json!({"required": [1]}),
            json!({"properties": []}),
            json!({"minLength": -1}),
            json!({"maxItems": 1.5}),
            json!({"minimum": "3"}),
            json!({"exclusiveMinimum": true}),
            json!({"multipleOf": 0}),
            json!({"multipleOf": 0.1}),
            json!({"uniqueItems": "yes"}),
            json!({"anyOf": []}),
            json!({"not": 3}),
            json!({"pattern": "(?=a)b"}),
            json!({"pattern": "(a)\\1"}),
            json!({"pattern": "\\p{L}"}),
            json!({"pattern": "(?i)abc"}),
            json!({"pattern": "[^\\S]"}),
            json!({"pattern": "[]a]"}),
            json!({"pattern": "("}),
        ] {
            refused(schema);
        }
        assert_eq!(
            refused(json!({"properties": {"n": {"type": 12}}})).location,
            "/properties/n/type"
        );
    }

    #[test]
    fn types_including_whole_doubles_as_integers() {
        let s = compile(json!({"type": ["integer", "null"]}));
        for ok in [
            json!(3),
            json!(-3),
            json!(3.0),
            json!(u64::MAX),
            Value::Null,
        ] {
            s.check(&ok).unwrap();
        }
        for bad in [json!(3.5), json!("3"), json!(true), json!([]), json!({})] {
            let v = violation(&s, bad);
            assert!(v.message.contains("integer or null"), "{}", v.message);
        }
        let s = compile(json!({"type": "number"}));
        s.check(&json!(3.5)).unwrap();
        s.check(&json!(3)).unwrap();
        assert_eq!(
            violation(&s, json!("1")).message,
            "\"1\" is not of type number"
        );
    }

    #[test]
    fn objects_name_the_failing_property() {
        let s = compile(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "opts": {"type": "object", "properties": {"depth/max": {"maximum": 3}}}
            },
            "required": ["path"],
            "additionalProperties": false,
            "maxProperties": 2
        }));
        s.check(&json!({"path": "a", "opts": {"depth/max": 3}}))
            .unwrap();
        let v = violation(&s, json!({}));
        assert_eq!(
            (v.field.as_str(), v.message.as_str()),
            ("", "\"path\" is a required property")
        );
        let v = violation(&s, json!({"path": ""}));
        assert_eq!(v.field, "/path");
        assert!(v.message.contains("shorter than 1"), "{}", v.message);
        let v = violation(&s, json!({"path": "a", "opts": {"depth/max": 4}}));
        assert_eq!(v.field, "/opts/depth~1max");
        assert_eq!(v.message, "4 is greater than the maximum of 3");
        let v = violation(&s, json!({"path": "a", "extra": 1}));
        assert_eq!(v.field, "");
        assert!(
            v.message.contains("\"extra\" is not allowed"),
            "{}",
            v.message
        );
        let s = compile(json!({"additionalProperties": {"type": "string"}, "minProperties": 1}));
        s.check(&json!({"x": "y"})).unwrap();
        assert_eq!(violation(&s, json!({"x": 1})).field, "/x");
        assert!(violation(&s, json!({})).message.contains("fewer than 1"));
    }

    #[test]
    fn arrays_name_the_failing_item() {
        let s = compile(json!({
            "type": "array",
            "items": {"type": "array", "items": {"enum": ["a", 1]}},
            "minItems": 1,
            "maxItems": 3,
            "uniqueItems": true
        }));
        s.check(&json!([["a"], [1.0, "a"]])).unwrap();
        let v = violation(&s, json!([["a"], ["a", "b"]]));
        assert_eq!(v.field, "/1/1");
        assert_eq!(v.message, "\"b\" is not one of \"a\", 1");
        assert!(violation(&s, json!([])).message.contains("fewer than 1"));
        assert!(violation(&s, json!([[], [1], ["a"], [1, 1]]))
            .message
            .contains("more than 3"));
        // 1 and 1.0 are the same JSON value; so are objects with the keys in another order.
        let v = violation(&s, json!([[1], [1.0]]));
        assert_eq!(
            v.message,
            "items 0 and 1 are equal, and items must be unique"
        );
        let s = compile(json!({"uniqueItems": true}));
        assert!(s
            .check(&json!([{"a": 1, "b": [2]}, {"b": [2.0], "a": 1}]))
            .is_err());
        s.check(&json!([{"a": 1}, {"a": "1"}, [1], "1", 1, 1.5, null, false]))
            .unwrap();
    }

    #[test]
    fn strings_count_characters_and_match_patterns_anywhere() {
        let s = compile(json!({"minLength": 2, "maxLength": 3}));
        s.check(&json!("éé")).unwrap();
        s.check(&json!("日本語")).unwrap();
        assert!(s.check(&json!("é")).is_err());
        assert!(s.check(&json!("abcd")).is_err());
        // minLength says nothing about numbers.
        s.check(&json!(1)).unwrap();
        let s = compile(json!({"pattern": "[0-9]{3}"}));
        s.check(&json!("ab123cd")).unwrap();
        let v = violation(&s, json!("12"));
        assert_eq!(v.message, "\"12\" does not match \"[0-9]{3}\"");
        let s = compile(json!({"pattern": "^[a-z][a-z0-9-]*$"}));
        s.check(&json!("skill-1")).unwrap();
        assert!(s.check(&json!("Skill")).is_err());
        assert!(s.check(&json!("a\nb")).is_err());
    }

    #[test]
    fn patterns_keep_ecma_meaning_of_dot_and_spaces() {
        let no_space = compile(json!({"pattern": "^\\S+$"}));
        no_space.check(&json!("abc")).unwrap();
        for spaced in ["a b", "a\u{a0}b", "a\u{3000}b", "a\u{feff}b"] {
            assert!(no_space.check(&json!(spaced)).is_err(), "{spaced:?}");
        }
        let one_line = compile(json!({"pattern": "^.*$"}));
        one_line.check(&json!("any thing")).unwrap();
        for broken in ["a\rb", "a\nb", "a\u{2028}b"] {
            assert!(one_line.check(&json!(broken)).is_err(), "{broken:?}");
        }
        let spaces = compile(json!({"pattern": "^[\\sx]+$"}));
        spaces.check(&json!("x\u{a0}x\t")).unwrap();
        let literal_dot = compile(json!({"pattern": "^a[.]b\\.c$"}));
        literal_dot.check(&json!("a.b.c")).unwrap();
        assert!(literal_dot.check(&json!("axb.c")).is_err());
        let grouped = compile(json!({"pattern": "^(?:ab)+$"}));
        grouped.check(&json!("abab")).unwrap();
    }

    #[test]
    fn numbers_compare_exactly() {
        let s = compile(json!({"minimum": 1, "maximum": 9007199254740992_u64}));
        s.check(&json!(1)).unwrap();
        s.check(&json!(1.0)).unwrap();
        s.check(&json!(9007199254740992_u64)).unwrap();
        assert!(s.check(&json!(9007199254740993_u64)).is_err());
        assert!(s.check(&json!(0.999)).is_err());
        assert_eq!(
            violation(&s, json!(0)).message,
            "0 is less than the minimum of 1"
        );
        let s = compile(json!({"exclusiveMinimum": 0, "exclusiveMaximum": 1.5}));
        s.check(&json!(0.1)).unwrap();
        s.check(&json!(1)).unwrap();
        assert!(s.check(&json!(0)).is_err());
        assert!(s.check(&json!(1.5)).is_err());
        assert!(s.check(&json!(-1e300)).is_err());
        assert!(s.check(&json!(1e300)).is_err());
        let s = compile(json!({"minimum": -1.5}));
        s.check(&json!(-1)).unwrap();
        assert!(s.check(&json!(-2)).is_err());
        assert!(s.check(&json!(i64::MIN)).is_err());
        let s = compile(json!({"multipleOf": 3}));
        s.check(&json!(9)).unwrap();
        s.check(&json!(-9.0)).unwrap();
        // A whole double beyond u64: 3 * 2^100 is exact, and a multiple of 3.
        s.check(&json!(3.0 * 2f64.powi(100))).unwrap();
        assert!(s.check(&json!(2f64.powi(100))).is_err());
        assert!(s.check(&json!(10)).is_err());
        assert!(s.check(&json!(4.5)).is_err());
    }

    #[test]
    fn combinators() {
        let s = compile(json!({
            "anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}],
            "not": {"const": "forbidden"}
        }));
        s.check(&json!("ok")).unwrap();
        s.check(&json!(4)).unwrap();
        assert!(violation(&s, json!(-1))
            .message
            .contains("none of the anyOf"));
        assert!(violation(&s, json!("forbidden"))
            .message
            .contains("under not"));
        let s = compile(json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}));
        s.check(&json!(1.5)).unwrap();
        assert!(violation(&s, json!(1))
            .message
            .contains("matches 2 of the oneOf"));
        assert!(violation(&s, json!("1"))
            .message
            .contains("matches 0 of the oneOf"));
        let s = compile(json!({"properties": {"n": {"allOf": [{"minimum": 1}, {"maximum": 2}]}}}));
        s.check(&json!({"n": 2})).unwrap();
        let v = violation(&s, json!({"n": 3}));
        assert_eq!(v.field, "/n");
        let s = compile(json!({"properties": {"never": false, "any": true}}));
        s.check(&json!({"any": [1]})).unwrap();
        assert_eq!(violation(&s, json!({"never": 1})).field, "/never");
        let s = compile(json!({"const": {"a": [1, 2]}}));
        s.check(&json!({"a": [1.0, 2]})).unwrap();
        assert!(s.check(&json!({"a": [2, 1]})).is_err());
    }

    /// Params a ticket model accepts, for all three generators' schemas.
    fn ticket() -> Value {
        json!({
            "id": "0b6f3a52-3f5e-4a55-9c3e-2f1d6c1b7a10",
            "email": "ann@example.org",
            "title": "Printer on fire",
            "priority": "low",
            "created": "2026-11-27T10:00:00Z",
            "address": {"street": "Main St 1", "city": "Oslo"},
            "home": {"street": "Main St 1", "city": "Oslo"},
            "tree": {"name": "root", "children": [{"name": "a", "children": [{"name": "b"}]}]},
            "pet": {"kind": "cat", "lives": 9, "good": true},
            "tags": ["urgent"]
        })
    }

    fn without(mut value: Value, path: &[&str]) -> Value {
        let (last, parents) = path.split_last().unwrap();
        let mut at = &mut value;
        for key in parents {
            at = at.get_mut(*key).unwrap();
        }
        at.as_object_mut().unwrap().remove(*last);
        value
    }

    fn with(mut value: Value, path: &[&str], new: Value) -> Value {
        let (last, parents) = path.split_last().unwrap();
        let mut at = &mut value;
        for key in parents {
            at = at.get_mut(*key).unwrap();
        }
        at.as_object_mut().unwrap().insert((*last).to_string(), new);
        value
    }

    #[test]
    fn what_pydantic_emits_compiles_and_checks_like_the_model() {
        let schema: Value =
            serde_json::from_str(include_str!("../../tests/skill_schemas/pydantic.json")).unwrap();
        let s = compile(schema);
        // pydantic's model has no email, home, or `good` on a cat; extra
        // properties are allowed (no additionalProperties).
        let ok = ticket();
        s.check(&ok).unwrap();
        s.check(&with(ok.clone(), &["pet"], json!({"kind": "dog"})))
            .unwrap();
        // `format` is an annotation: the model checks its own dates.
        s.check(&with(ok.clone(), &["created"], json!("yesterday")))
            .unwrap();
        let v = violation(&s, without(ok.clone(), &["address", "city"]));
        assert_eq!(v.field, "/address");
        assert!(
            v.message.contains("\"city\" is a required property"),
            "{v:?}"
        );
        // Recursion through $ref reaches every level of the tree.
        let deep = with(
            ok.clone(),
            &["tree", "children"],
            json!([{"name": "a", "children": [{"name": 3}]}]),
        );
        assert_eq!(
            violation(&s, deep).field,
            "/tree/children/0/children/0/name"
        );
        let v = violation(
            &s,
            with(ok.clone(), &["pet"], json!({"kind": "cat", "lives": 10})),
        );
        assert!(v.message.contains("oneOf"), "{v:?}");
        let v = violation(&s, with(ok.clone(), &["priority"], json!("urgent")));
        assert_eq!(v.field, "/priority");
        s.check(&with(ok.clone(), &["due"], Value::Null)).unwrap();
        assert_eq!(violation(&s, with(ok, &["due"], json!(5))).field, "/due");
    }

    #[test]
    fn what_zod_emits_compiles_and_checks_like_the_model() {
        for (name, text) in [
            (
                "zod-to-json-schema",
                include_str!("../../tests/skill_schemas/zod-to-json-schema.json"),
            ),
            ("zod 4", include_str!("../../tests/skill_schemas/zod4.json")),
        ] {
            let s = ParamsSchema::compile(&serde_json::from_str(text).unwrap())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            // zod's objects are closed (additionalProperties: false).
            let ok = without(without(ticket(), &["address"]), &["pet", "good"]);
            s.check(&ok).unwrap_or_else(|v| panic!("{name}: {v:?}"));
            let ok = with(ok, &["pet"], json!({"kind": "dog", "good": false}));
            s.check(&ok).unwrap_or_else(|v| panic!("{name}: {v:?}"));
            // `work` is a $ref to `home`'s schema in zod-to-json-schema.
            let v = violation(&s, with(ok.clone(), &["work"], json!({"street": ""})));
            assert!(v.field.starts_with("/work"), "{name}: {v:?}");
            let v = violation(&s, with(ok.clone(), &["extra"], json!(1)));
            assert!(v.message.contains("not allowed"), "{name}: {v:?}");
            let deep = with(
                ok.clone(),
                &["tree", "children"],
                json!([{"name": "a", "children": [{"name": "b", "x": 1}]}]),
            );
            let v = violation(&s, deep);
            assert!(v.message.contains("\"x\" is not allowed"), "{name}: {v:?}");
            assert_eq!(v.field, "/tree/children/0/children/0", "{name}");
        }
    }

    #[test]
    fn references_resolve_by_pointer_and_refuse_what_cannot_be_resolved() {
        let s = compile(json!({
            "definitions": {"n": {"type": "integer"}, "a~b/c": {"minimum": 2}},
            "properties": {
                "x": {"$ref": "#/definitions/n"},
                "y": {"$ref": "#/definitions/a~0b~1c"},
                "z": {"$ref": "#/properties/x"},
                "w": {"$ref": "#/%64efinitions/n"}
            }
        }));
        s.check(&json!({"x": 1, "y": 3, "z": 2, "w": 4})).unwrap();
        for (params, field) in [
            (json!({"x": "1"}), "/x"),
            (json!({"y": 1}), "/y"),
            (json!({"z": 1.5}), "/z"),
            (json!({"w": "4"}), "/w"),
        ] {
            assert_eq!(violation(&s, params).field, field);
        }
        for (schema, message) in [
            (json!({"$ref": "#/$defs/missing"}), "points at nothing"),
            (
                json!({"$ref": "https://example.org/s.json"}),
                "another document",
            ),
            (json!({"$ref": "other.json#/a"}), "another document"),
            (json!({"$ref": "#anchor"}), "anchor"),
            (json!({"$ref": "#/a~2"}), "`~0` or `~1`"),
            (json!({"$ref": "#/%zz"}), "percent-encoding"),
            (json!({"$ref": 3}), "must be a string"),
            (json!({"$defs": []}), "must map names"),
            (json!({"$defs": {"bad": {"type": "text"}}}), "is not one of"),
            (json!({"$ref": "#"}), "leads back to itself"),
            (
                json!({"$defs": {"a": {"$ref": "#/$defs/b", "title": "A"}, "b": {"$ref": "#/$defs/a"}}}),
                "leads back to itself",
            ),
        ] {
            let err = refused(schema.clone());
            assert!(err.to_string().contains(message), "{schema}: {err}");
        }
    }

    #[test]
    fn hostile_schemas_are_bounded_in_size_depth_and_work() {
        // Too many references.
        let mut definitions = Map::new();
        for i in 0..=MAX_REFERENCES {
            definitions.insert(format!("d{i}"), json!({"type": "integer"}));
        }
        let err = refused(json!({"$defs": definitions}));
        assert!(err.message.contains("more than 1024"), "{err}");

        // Nesting beyond the bound is refused, not recursed into.
        let mut deep = json!({"type": "integer"});
        for _ in 0..MAX_SCHEMA_DEPTH {
            deep = json!({"not": deep});
        }
        assert!(refused(deep).message.contains("nest deeper"));

        // A schema naming one target many times compiles it once: a chain
        // of definitions each using the previous one twice would be 2^60
        // copies if references were expanded.
        let mut definitions = Map::new();
        definitions.insert("d0".into(), json!({"type": "integer"}));
        for i in 1..60 {
            let previous = format!("#/$defs/d{}", i - 1);
            definitions.insert(
                format!("d{i}"),
                json!({"anyOf": [{"$ref": previous}, {"$ref": previous}]}),
            );
        }
        let s = compile(json!({"$defs": definitions, "$ref": "#/$defs/d59"}));
        assert_eq!(s.targets.len(), 60);
        // Checking it doubles its work at each level: the step bound stops
        // it and the params are refused, not passed.
        let v = violation(&s, json!("not an integer"));
        assert!(v.message.contains("recurse too far"), "{v:?}");
        // Hidden under `not`, an exhausted check still refuses.
        let s = compile(json!({"$defs": definitions, "not": {"$ref": "#/$defs/d59"}}));
        let v = violation(&s, json!("a string d59 would refuse"));
        assert!(v.message.contains("recurse too far"), "{v:?}");

        // Recursion through allOf without descending into the value stops
        // at the depth bound.
        let s = compile(json!({"allOf": [{"$ref": "#"}], "type": "object"}));
        let v = violation(&s, json!({}));
        assert!(v.message.contains("recurse too far"), "{v:?}");

        // Legitimate recursion follows the value as deep as it goes.
        let s = compile(json!({
            "type": "object",
            "properties": {"next": {"$ref": "#"}, "n": {"type": "integer"}}
        }));
        let mut chain = json!({"n": 0});
        for _ in 0..100 {
            chain = json!({"n": 1, "next": chain});
        }
        s.check(&chain).unwrap();
    }

    #[test]
    fn annotations_are_accepted_and_do_not_constrain() {
        let s = compile(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "t",
            "description": "d",
            "$comment": "c",
            "default": 3,
            "examples": [1],
            "properties": {
                "x": {"description": "x", "deprecated": true, "readOnly": false},
                "when": {"type": "string", "format": "date-time"},
                "made-up": {"format": "a-format-nobody-knows"}
            }
        }));
        s.check(&json!({"x": "anything"})).unwrap();
        s.check(&json!({"when": "not a date", "made-up": 1}))
            .unwrap();
        s.check(&json!(7)).unwrap();
    }

    #[test]
    fn a_shown_schema_is_bounded_and_says_what_it_shows() {
        let plain = json!({"type": "object", "properties": {"path": {
            "type": "string", "description": "Where.\n\tIndented.", "pattern": "^[a-z]+$"}}});
        assert_eq!(check_shown(&plain), Ok(()));
        let bidi = json!({"properties": {"p": {"description": "ok\u{202e}exe.txt"}}});
        let error = check_shown(&bidi).unwrap_err();
        assert_eq!(error.location, "/properties/p/description");
        assert!(error.message.contains("\\u{202e}"), "{error}");
        let key = json!({"properties": {"a\u{1b}[2Jb": {}}});
        assert_eq!(check_shown(&key).unwrap_err().location, "/properties");
        let mut deep = json!({});
        for _ in 0..MAX_SHOWN_DEPTH - 1 {
            deep = json!({ "items": deep });
        }
        assert_eq!(check_shown(&deep), Ok(()));
        assert!(check_shown(&json!({ "items": deep })).is_err());
        let big = json!({"description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert!(check_shown(&big)
            .unwrap_err()
            .message
            .contains("bytes as JSON"));
    }
}
