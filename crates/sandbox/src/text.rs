//! Cutting text to a byte budget without splitting a character.
//!
//! `str::floor_char_boundary` does this from Rust 1.91; the crate builds
//! with 1.85 (`rust-version`), so this is its stand-in, with the same
//! meaning, until that rises.

/// The largest character boundary of `text` at or below `index`: the
/// length to cut `text` to so that it stays within `index` bytes and
/// valid UTF-8 (`text.len()` when `index` is past the end).
pub fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    // A UTF-8 character is at most 4 bytes, and 0 is always a boundary.
    (index.saturating_sub(3)..=index)
        .rev()
        .find(|at| text.is_char_boundary(*at))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_text_cuts_at_zero() {
        assert_eq!(floor_char_boundary("", 0), 0);
        assert_eq!(floor_char_boundary("", 5), 0);
    }

    #[test]
    fn ascii_cuts_exactly_at_the_index() {
        assert_eq!(floor_char_boundary("abcdef", 0), 0);
        assert_eq!(floor_char_boundary("abcdef", 3), 3);
        assert_eq!(floor_char_boundary("abcdef", 6), 6);
    }

    #[test]
    fn a_cut_inside_a_character_falls_back_to_its_start() {
        // "a" then a 2-, a 3- and a 4-byte character: é (1..3), € (3..6),
        // 𝄞 (6..10).
        let text = "aé€𝄞";
        assert_eq!(text.len(), 10);
        let cuts: Vec<usize> = (0..=10).map(|at| floor_char_boundary(text, at)).collect();
        assert_eq!(cuts, [0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10]);
        for at in 0..=10 {
            let cut = floor_char_boundary(text, at);
            assert!(cut <= at && text.is_char_boundary(cut), "{at}");
        }
    }

    #[test]
    fn an_index_past_the_end_keeps_all_the_text() {
        assert_eq!(floor_char_boundary("é€", 5), 5);
        assert_eq!(floor_char_boundary("é€", 6), 5);
        assert_eq!(floor_char_boundary("é€", usize::MAX), 5);
    }
}
