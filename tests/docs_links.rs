//! Every relative link in README.md, profiles/README.md and the book
//! (docs/src) points to a file that exists, and every `#anchor` to a heading
//! of its target, so moving or renaming a chapter cannot leave dead links.
//!
//! Anchors are the ids GitHub and mdBook both give a heading: lower case,
//! letters, digits, `-` and `_` kept, spaces turned into `-`, the rest
//! dropped; a repeated heading gets `-1`, `-2`, ...

mod support;

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// The text outside fenced code blocks and inline code spans, line by line
/// (numbered from 1), where a link is a link.
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut prose = String::new();
        for (i, piece) in line.split('`').enumerate() {
            if i % 2 == 0 {
                prose.push_str(piece);
            }
        }
        out.push((index + 1, prose));
    }
    out
}

/// The targets of inline links `[text](target)` in a line of prose.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or_default();
        out.push(target.to_owned());
        rest = &after[end..];
    }
    out
}

fn slug(heading: &str) -> String {
    let mut out = String::new();
    for c in heading.trim().chars() {
        if c.is_alphanumeric() || c == '-' || c == '_' {
            out.extend(c.to_lowercase());
        } else if c == ' ' {
            out.push('-');
        }
    }
    out
}

/// The anchors of a Markdown file's headings.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let heading = heading.replace("**", "");
        let base = slug(&link_text_only(&heading));
        let mut id = base.clone();
        let mut n = 0;
        while seen.contains(&id) {
            n += 1;
            id = format!("{base}-{n}");
        }
        seen.insert(id);
    }
    seen
}

/// `[text](target)` reduced to `text`, as a heading's id is made from it.
fn link_text_only(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|mid| {
            after[mid + 2..]
                .find(')')
                .map(|close| (mid, mid + 2 + close + 1))
        }) {
            Some((mid, end)) => {
                out.push_str(&after[..mid]);
                rest = &after[end..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `dir/target` with `.` and `..` resolved, or None when it leaves the
/// repository.
fn resolve(root: &Path, dir: &Path, target: &str) -> Option<PathBuf> {
    let mut path = PathBuf::new();
    for component in dir.join(target).components() {
        match component {
            Component::ParentDir => {
                if !path.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => path.push(other),
        }
    }
    path.starts_with(root).then_some(path)
}

fn broken_links(root: &Path, document: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(document).expect("read the document");
    let relative = document.strip_prefix(root).expect("below the root");
    let dir = document.parent().expect("a file has a directory");
    let book = root.join("docs/src");
    let mut broken = Vec::new();
    for (number, line) in prose_lines(&text) {
        for target in link_targets(&line) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let where_ = format!("{}:{number}: `{target}`", relative.display());
            let path = if file.is_empty() {
                document.to_path_buf()
            } else {
                match resolve(root, dir, file) {
                    Some(path) => path,
                    None => {
                        broken.push(format!("{where_} leaves the repository"));
                        continue;
                    }
                }
            };
            if !path.exists() {
                broken.push(format!("{where_}: no such file"));
                continue;
            }
            // mdBook turns every link to a .md file into one to .html, which
            // exists only for the book's own chapters.
            if document.starts_with(&book)
                && !path.starts_with(&book)
                && path.extension().is_some_and(|ext| ext == "md")
            {
                broken.push(format!(
                    "{where_}: a chapter's link to Markdown outside docs/src breaks in the built book (mdBook makes it .html); name the file in code instead"
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if path.extension().is_none_or(|ext| ext != "md") {
                continue;
            }
            let target_text = std::fs::read_to_string(&path).expect("read the link's target");
            if !anchors(&target_text).contains(anchor) {
                broken.push(format!("{where_}: no heading with that anchor"));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let root = support::docs::repo_root();
    let documents = support::docs::documents(&["profiles/README.md"]);
    assert!(
        documents.len() > 10,
        "the book's chapters were not found: {documents:?}"
    );
    let mut links = 0;
    let mut broken = Vec::new();
    for document in &documents {
        let text = std::fs::read_to_string(document).expect("read the document");
        links += prose_lines(&text)
            .iter()
            .map(|(_, line)| link_targets(line).len())
            .sum::<usize>();
        broken.extend(broken_links(&root, document));
    }
    assert!(
        links > 20,
        "only {links} links found: is the parser broken?"
    );
    assert!(
        broken.is_empty(),
        "{} broken link(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// Every chapter file is in SUMMARY.md, and everything SUMMARY.md lists
/// exists: mdBook builds only what the summary names.
#[test]
fn the_summary_lists_every_chapter() {
    let src = support::docs::repo_root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("SUMMARY.md");
    let listed: HashSet<String> = prose_lines(&summary)
        .iter()
        .flat_map(|(_, line)| link_targets(line))
        .collect();
    for document in support::docs::documents(&["profiles/README.md"]) {
        let Ok(relative) = document.strip_prefix(&src) else {
            continue;
        };
        let relative = relative.display().to_string();
        if relative != "SUMMARY.md" {
            assert!(
                listed.contains(&relative),
                "docs/src/{relative} is not in SUMMARY.md, so the book leaves it out"
            );
        }
    }
}

#[test]
fn the_checker_finds_what_it_should() {
    assert_eq!(
        link_targets("see [a](b.md#c) and [d](e \"t\") but"),
        ["b.md#c", "e"]
    );
    assert_eq!(slug("`doctor --json`"), "doctor---json");
    assert_eq!(
        slug("The network: an allowlist nobody bypasses"),
        "the-network-an-allowlist-nobody-bypasses"
    );
    let ids = anchors("# A\n## A\n```\n# not a heading\n```\n### [Link](x.md) b\n");
    assert_eq!(
        ids,
        HashSet::from(["a".to_owned(), "a-1".to_owned(), "link-b".to_owned()])
    );
    assert_eq!(prose_lines("x `[a](b)` y")[0].1, "x  y");
    let root = Path::new("/r");
    assert_eq!(
        resolve(root, Path::new("/r/docs/src"), "../../profiles/"),
        Some(PathBuf::from("/r/profiles"))
    );
    assert_eq!(
        resolve(root, Path::new("/r/docs"), "../../etc/passwd"),
        None
    );
}
