//! Checking params against a compiled schema: the first violation and
//! where, within the bounds on depth and steps; JSON numbers compared
//! exactly and values compared as JSON does.

use std::cell::Cell;
use std::cmp::Ordering;
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

use super::compile::push_pointer;
use super::{Checks, Node, MAX_CHECK_DEPTH, MAX_CHECK_STEPS};

/// What one check of params carries down the schema.
pub(super) struct Walk<'a> {
    pub(super) targets: &'a [Node],
    pub(super) steps: Cell<u64>,
    /// A bound was reached: the params are refused whatever else was found.
    pub(super) exhausted: Cell<bool>,
}

impl Node {
    pub(super) fn first_violation(
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

    pub(super) fn admits(&self, value: &Value, walk: &Walk, depth: usize) -> bool {
        self.first_violation(value, &mut String::new(), walk, depth)
            .is_none()
    }
}

impl Checks {
    pub(super) fn first_violation(
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

    pub(super) fn object_violation(
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

    pub(super) fn array_violation(
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

    pub(super) fn string_violation(&self, s: &str) -> Option<String> {
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

    pub(super) fn number_violation(&self, n: &Number) -> Option<String> {
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
