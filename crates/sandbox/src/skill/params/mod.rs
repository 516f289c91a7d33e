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

//!
//! One file per job: `compile` (a schema to checks), `check` (params
//! against them), `shown` (what a schema may show an agent host).

use std::cell::Cell;
use std::collections::HashMap;

use serde_json::{Number, Value};

use super::schema_pointer::resolve_pointer;

mod check;
mod compile;
mod shown;

pub use shown::{check_shown, MAX_SCHEMA_BYTES, MAX_SHOWN_DEPTH};

use check::Walk;
use compile::{schema_error, Compiler};

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map};

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
        let schema: Value = serde_json::from_str(include_str!(
            "../../../../../tests/skill_schemas/pydantic.json"
        ))
        .unwrap();
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
                include_str!("../../../../../tests/skill_schemas/zod-to-json-schema.json"),
            ),
            (
                "zod 4",
                include_str!("../../../../../tests/skill_schemas/zod4.json"),
            ),
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
