//! Characters that must never reach a person's terminal or a log raw,
//! whatever text the payload supplied: the prompt and the audit log escape
//! the same set.

/// C0 and C1 controls and DEL (U+009B is CSI on terminals that read 8-bit
/// controls), and everything [`invisible_or_reordering`] names.
pub fn must_escape(c: char) -> bool {
    c.is_control() || invisible_or_reordering(c)
}

/// `text` with every [`must_escape`] character written `\u{XXXX}`: what a
/// payload named (a path, a process name) put where a person reads it or
/// a parser reads on (a comment in a written profile, where a newline
/// would end the comment and start a setting).
pub fn shown(text: &str) -> String {
    text.chars()
        .map(|c| {
            if must_escape(c) {
                format!("\\u{{{:04x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Characters that show nothing or reorder what is shown.
pub fn invisible_or_reordering(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}'
        // zero-width, bidi marks and embeddings, U+2028/2029 line and
        // paragraph separators, word joiner, invisible operators, isolates
        | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}'
        | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}'
        // tag characters (invisible ASCII look-alikes) and variation selectors
        | '\u{E0000}'..='\u{E007F}' | '\u{E0100}'..='\u{E01EF}')
}
