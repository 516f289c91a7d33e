//! Name patterns for project paths at any depth: the secrets strict hides and
//! the files it protects from writes.
//!
//! The syntax is gitignore's, reduced to what these lists need:
//! - a pattern without a `/` in it (`.env`, `*.pem`) matches that name at any depth;
//! - a pattern with a `/` inside (`.git/hooks`) matches that path suffix at any
//!   depth (`sub/.git/hooks` too); a leading `/` anchors it at the project root;
//! - a trailing `/` matches directories only (`.ssh/`);
//! - `*` is any run of characters but `/`, `?` one such character, `\x` a
//!   literal x, and a `**` segment any number of directories (`.git/**/hooks`);
//! - `!pattern` is an exception: an entry it matches is not in the list, even
//!   when an earlier pattern matched it (`!.env.example`).
//!
//! Matching runs once per entry of a walk over the whole project, so it works
//! on borrowed name components and allocates nothing.

use std::fmt;

/// Why a pattern is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Nothing left once `!`, `/` and `./` are taken off.
    #[error("the pattern {0:?} is empty")]
    Empty(String),
    /// `..` would point outside the entry the pattern is matched against.
    #[error("the pattern {0:?} contains `..`")]
    ParentDir(String),
    /// A NUL byte can never be in a file name.
    #[error("the pattern {0:?} contains a NUL byte")]
    Nul(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Matches exactly these bytes.
    Literal(Vec<u8>),
    /// Contains `*` or `?`.
    Glob(Vec<u8>),
    /// `**`: any number of components.
    AnyDepth,
}

/// One compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    segments: Vec<Segment>,
    anchored: bool,
    dir_only: bool,
    negated: bool,
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Pattern {
    /// Compile `text`.
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        if text.contains('\0') {
            return Err(PatternError::Nul(text.to_owned()));
        }
        let (negated, rest) = match text.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let anchored = rest.starts_with('/');
        let dir_only = rest.ends_with('/');
        let mut segments = Vec::new();
        for part in rest.split('/') {
            match part {
                "" | "." => continue,
                ".." => return Err(PatternError::ParentDir(text.to_owned())),
                "**" => {
                    if segments.last() != Some(&Segment::AnyDepth) {
                        segments.push(Segment::AnyDepth);
                    }
                }
                _ if part.contains(['*', '?', '\\']) => segments.push(Segment::Glob(part.into())),
                _ => segments.push(Segment::Literal(part.into())),
            }
        }
        if segments.iter().all(|s| *s == Segment::AnyDepth) {
            return Err(PatternError::Empty(text.to_owned()));
        }
        Ok(Pattern {
            text: text.to_owned(),
            segments,
            anchored,
            dir_only,
            negated,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern's last segment can match `name` at all: the cheap
    /// test a walk runs first, since almost no entry matches anything.
    fn last_segment_matches(&self, name: &[u8]) -> bool {
        match self.segments.last() {
            Some(Segment::Literal(lit)) => lit == name,
            Some(Segment::Glob(glob)) => glob_segment(glob, name),
            Some(Segment::AnyDepth) | None => true,
        }
    }

    /// Whether the entry at `path` (its components below the project root)
    /// matches, ignoring negation.
    fn matches_path<C: AsRef<[u8]>>(&self, path: &[C], is_dir: bool) -> bool {
        if self.dir_only && !is_dir {
            return false;
        }
        let Some(last) = path.last() else {
            return false;
        };
        if !self.last_segment_matches(last.as_ref()) {
            return false;
        }
        if self.anchored {
            segments_match(&self.segments, path)
        } else {
            (0..path.len()).any(|start| segments_match(&self.segments, &path[start..]))
        }
    }
}

fn glob_segment(pattern: &[u8], name: &[u8]) -> bool {
    // Iterative with one backtrack point: linear in practice, never exponential.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(b'?') => {
                p += 1;
                n += 1;
            }
            // `\x` is a literal x (a stored grant escapes a name's `*`).
            Some(b'\\') if pattern.get(p + 1) == Some(&name[n]) => {
                p += 2;
                n += 1;
            }
            Some(c) if *c == name[n] && *c != b'\\' => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == b'*')
}

fn segments_match<C: AsRef<[u8]>>(segments: &[Segment], path: &[C]) -> bool {
    match segments.first() {
        None => path.is_empty(),
        Some(Segment::AnyDepth) => {
            (0..=path.len()).any(|skip| segments_match(&segments[1..], &path[skip..]))
        }
        Some(segment) => {
            let Some(first) = path.first() else {
                return false;
            };
            let ok = match segment {
                Segment::Literal(lit) => lit.as_slice() == first.as_ref(),
                Segment::Glob(glob) => glob_segment(glob, first.as_ref()),
                Segment::AnyDepth => true,
            };
            ok && segments_match(&segments[1..], &path[1..])
        }
    }
}

/// Whether `target` (a `/`-separated path) matches `pattern` as a whole,
/// with the same segments as a pattern list's (`*`, `?`, `\\x`, `**`); empty
/// and `.` components are ignored on both sides. The broker's rule and grant
/// patterns use this.
pub fn glob_path(pattern: &str, target: &str) -> bool {
    let mut segments: Vec<Segment> = Vec::new();
    for part in pattern.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if part == "**" {
            if segments.last() != Some(&Segment::AnyDepth) {
                segments.push(Segment::AnyDepth);
            }
        } else {
            segments.push(Segment::Glob(part.into()));
        }
    }
    let target: Vec<&[u8]> = target
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::as_bytes)
        .collect();
    segments_match(&segments, &target)
}

/// An ordered list of patterns with exceptions: the last pattern that
/// matches an entry decides (as in `.gitignore`).
///
/// Compiled once and shared: a run's policy, its nested sandbox's and its
/// sweep each hold the same lists, and copying and dropping them (every
/// pattern, every literal name) took 4% of the supervisor's user time in a
/// profile of strict runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatternList(std::sync::Arc<Compiled>);

#[derive(Debug, Default, PartialEq, Eq)]
struct Compiled {
    patterns: Vec<Pattern>,
    /// Every literal last segment: a walk asks about every name in the
    /// project, and almost none can match, which a set lookup tells at once.
    literal_names: std::collections::BTreeSet<Vec<u8>>,
    /// The patterns (by index, in order) that end in a glob or `**`: the
    /// only ones a name outside `literal_names` can match.
    glob_named: Vec<usize>,
}

impl PatternList {
    /// Compile every pattern, in order.
    pub fn parse<S: AsRef<str>>(texts: &[S]) -> Result<PatternList, PatternError> {
        let patterns = texts
            .iter()
            .map(|t| Pattern::parse(t.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut literal_names = std::collections::BTreeSet::new();
        let mut glob_named = Vec::new();
        for (index, pattern) in patterns.iter().enumerate() {
            match pattern.segments.last() {
                Some(Segment::Literal(name)) => {
                    literal_names.insert(name.clone());
                }
                _ => glob_named.push(index),
            }
        }
        Ok(PatternList(std::sync::Arc::new(Compiled {
            patterns,
            literal_names,
            glob_named,
        })))
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.0.patterns.iter().all(|p| p.negated)
    }

    /// The pattern that puts the entry at `path` in the list, if one does.
    pub fn matching<C: AsRef<[u8]>>(&self, path: &[C], is_dir: bool) -> Option<&Pattern> {
        let name = path.last()?.as_ref();
        // A pattern ending in a literal matches only that name, so for any
        // other name the patterns ending in a glob decide alone, in order.
        let list = &*self.0;
        let candidates: &mut dyn Iterator<Item = &Pattern> = if list.literal_names.contains(name) {
            &mut list.patterns.iter()
        } else {
            &mut list.glob_named.iter().map(|&index| &list.patterns[index])
        };
        let mut verdict = None;
        for pattern in candidates {
            if pattern.matches_path(path, is_dir) {
                verdict = if pattern.negated { None } else { Some(pattern) };
            }
        }
        verdict
    }

    /// [`PatternList::matching`] for a relative path written with `/`.
    pub fn matching_str(&self, relative: &str, is_dir: bool) -> Option<&Pattern> {
        let parts: Vec<&[u8]> = relative
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::as_bytes)
            .collect();
        self.matching(&parts, is_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(texts: &[&str]) -> PatternList {
        PatternList::parse(texts).unwrap()
    }

    #[test]
    fn names_match_at_any_depth() {
        let l = list(&[".env", ".env.*", "!.env.example", "*.pem", ".ssh/"]);
        assert!(l.matching_str(".env", false).is_some());
        assert!(l.matching_str("a/b/.env", false).is_some());
        assert!(l.matching_str("a/.env.production", false).is_some());
        assert!(l.matching_str("a/.env.example", false).is_none());
        assert!(l.matching_str("certs/server.pem", false).is_some());
        assert!(l.matching_str("x.pem.txt", false).is_none());
        assert!(l.matching_str("home/.ssh", true).is_some());
        assert!(l.matching_str("home/.ssh", false).is_none(), "dir-only");
        assert!(l.matching_str("env", false).is_none());
    }

    #[test]
    fn paths_match_as_suffixes_and_anchors_hold() {
        let l = list(&[".git/**/hooks", ".git/config", "/top.txt"]);
        assert!(l.matching_str(".git/hooks", true).is_some());
        assert!(l.matching_str("sub/.git/hooks", true).is_some());
        assert!(l.matching_str(".git/modules/lib/hooks", true).is_some());
        assert!(l.matching_str("hooks", true).is_none());
        assert!(l.matching_str("git/hooks", true).is_none());
        assert!(l.matching_str("a/.git/config", false).is_some());
        assert!(l.matching_str("top.txt", false).is_some());
        assert!(l.matching_str("a/top.txt", false).is_none());
    }

    #[test]
    fn the_last_matching_pattern_decides() {
        let l = list(&["*.key", "!public.key", "keys/public.key"]);
        assert!(l.matching_str("a.key", false).is_some());
        assert!(l.matching_str("public.key", false).is_none());
        assert!(l.matching_str("keys/public.key", false).is_some());
    }

    #[test]
    fn globs_do_not_backtrack_exponentially() {
        let l = list(&["*a*a*a*a*a*a*a*a*b"]);
        let name = "a".repeat(200);
        assert!(l.matching_str(&name, false).is_none());
        assert!(glob_segment(b"a*c?e", b"abbbcde"));
        assert!(glob_segment(b"*", b""));
        assert!(!glob_segment(b"?", b""));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(matches!(Pattern::parse(""), Err(PatternError::Empty(_))));
        assert!(matches!(Pattern::parse("!/"), Err(PatternError::Empty(_))));
        assert!(matches!(Pattern::parse("**"), Err(PatternError::Empty(_))));
        assert!(matches!(
            Pattern::parse("a/../b"),
            Err(PatternError::ParentDir(_))
        ));
        assert!(matches!(Pattern::parse("a\0"), Err(PatternError::Nul(_))));
    }
}

#[cfg(test)]
mod glob_path_tests {
    use super::glob_path;

    #[test]
    fn escapes_are_literal_and_stars_stay_in_a_segment() {
        assert!(glob_path(r"a\*b", "a*b"));
        assert!(!glob_path(r"a\*b", "axb"));
        assert!(glob_path(r"dir/\?.txt", "dir/?.txt"));
        assert!(!glob_path(r"dir/\?.txt", "dir/x.txt"));
        assert!(glob_path("dist/**", "dist"));
        assert!(!glob_path("*", "a/b"));
        let long = "a".repeat(500);
        assert!(
            !glob_path("*a*a*a*a*a*a*a*a*b", &long),
            "no exponential backtracking"
        );
    }
}
