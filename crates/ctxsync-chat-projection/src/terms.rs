//! find_tools' tokenizer: words split at anything but letters and digits and at case
//! changes (`getFileInfo`, `HTTPServer`), lower-cased, English stop words dropped, and
//! each word reduced to its stem (Porter's algorithm), so `listing`, `lists` and `listed`
//! are one term.

/// Words people put around what they ask for; they tell tools apart by nothing.
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "before", "being", "but", "by", "can", "could", "did", "do", "does", "doing",
    "for", "from", "further", "get", "give", "had", "has", "have", "having", "he", "her", "here",
    "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "let", "like", "me",
    "might", "more", "most", "must", "my", "myself", "need", "of", "on", "once", "only", "or",
    "other", "our", "ours", "own", "please", "same", "shall", "she", "should", "so", "some",
    "such", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this",
    "those", "to", "too", "us", "use", "using", "very", "want", "was", "we", "were", "what",
    "whats", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would",
    "you", "your", "yours",
];

/// Whether `word` (lower-case) is a stop word.
pub(crate) fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

/// What a char is to [`words`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Separator,
    Lower,
    Upper,
    /// Digits and letters without case.
    Other,
}

/// [`Class`] of every ASCII byte, so ASCII text is read a byte at a time.
const ASCII_CLASS: [Class; 128] = {
    let mut table = [Class::Separator; 128];
    let mut b = 0;
    while b < 128 {
        table[b] = match b as u8 {
            b'a'..=b'z' => Class::Lower,
            b'A'..=b'Z' => Class::Upper,
            b'0'..=b'9' => Class::Other,
            _ => Class::Separator,
        };
        b += 1;
    }
    table
};

/// The class of the char at byte `i` of `text` (a char boundary) and its length.
#[inline]
fn class_at(text: &str, i: usize) -> (Class, usize) {
    let b = text.as_bytes()[i];
    if b < 0x80 {
        return (ASCII_CLASS[usize::from(b)], 1);
    }
    let c = text[i..].chars().next().expect("i is a char boundary");
    let class = if !c.is_alphanumeric() {
        Class::Separator
    } else if c.is_uppercase() {
        Class::Upper
    } else if c.is_lowercase() {
        Class::Lower
    } else {
        Class::Other
    };
    (class, c.len_utf8())
}

/// The words of `text` as slices of it: alphanumeric runs, split again where the case
/// turns from lower to upper (`fileInfo`) and before the last capital of a capital run
/// followed by a lower-case letter (`HTTPServer` → `HTTP`, `Server`).
pub(crate) fn words(text: &str) -> impl Iterator<Item = &str> + '_ {
    let end = text.len();
    let mut at = 0;
    std::iter::from_fn(move || {
        loop {
            if at >= end {
                return None;
            }
            let (class, len) = class_at(text, at);
            if class != Class::Separator {
                break;
            }
            at += len;
        }
        let start = at;
        let mut previous = Class::Separator;
        while at < end {
            let (class, len) = class_at(text, at);
            if class == Class::Separator {
                break;
            }
            if class == Class::Upper
                && (previous == Class::Lower
                    || (previous == Class::Upper
                        && at + len < end
                        && class_at(text, at + len).0 == Class::Lower))
            {
                break;
            }
            previous = class;
            at += len;
        }
        Some(&text[start..at])
    })
}

/// The terms of `text` in order, repeats kept: lower-cased, stop words dropped, stemmed.
pub(crate) fn terms(text: &str) -> impl Iterator<Item = String> + '_ {
    words(text).filter_map(|word| {
        let lower = word.to_lowercase();
        (!is_stop_word(&lower)).then(|| stem(&lower))
    })
}

/// Porter's stemmer (1980), on a lower-case word. Words of two letters or fewer, and words
/// holding anything but ASCII letters, are kept as they are.
pub(crate) fn stem(word: &str) -> String {
    if word.len() <= 2 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return word.to_owned();
    }
    let mut w = word.as_bytes().to_vec();
    step_1a(&mut w);
    step_1b(&mut w);
    step_1c(&mut w);
    step_2(&mut w);
    step_3(&mut w);
    step_4(&mut w);
    step_5(&mut w);
    String::from_utf8(w).expect("ASCII in, ASCII out")
}

fn is_consonant(w: &[u8], i: usize) -> bool {
    match w[i] {
        b'a' | b'e' | b'i' | b'o' | b'u' => false,
        b'y' => i == 0 || !is_consonant(w, i - 1),
        _ => true,
    }
}

/// Porter's m: the number of vowel-consonant sequences in `w`.
fn measure(w: &[u8]) -> usize {
    let mut m = 0;
    let mut i = 0;
    while i < w.len() && is_consonant(w, i) {
        i += 1;
    }
    while i < w.len() {
        while i < w.len() && !is_consonant(w, i) {
            i += 1;
        }
        if i == w.len() {
            break;
        }
        while i < w.len() && is_consonant(w, i) {
            i += 1;
        }
        m += 1;
    }
    m
}

fn has_vowel(w: &[u8]) -> bool {
    (0..w.len()).any(|i| !is_consonant(w, i))
}

fn ends_double_consonant(w: &[u8]) -> bool {
    let n = w.len();
    n >= 2 && w[n - 1] == w[n - 2] && is_consonant(w, n - 1)
}

/// Consonant-vowel-consonant at the end, the last not w, x or y.
fn ends_cvc(w: &[u8]) -> bool {
    let n = w.len();
    n >= 3
        && is_consonant(w, n - 3)
        && !is_consonant(w, n - 2)
        && is_consonant(w, n - 1)
        && !matches!(w[n - 1], b'w' | b'x' | b'y')
}

/// Replaces `suffix` by `with` when `w` ends in it and the rest passes `condition`.
/// Returns whether `w` ended in `suffix` (replaced or not).
fn replace(w: &mut Vec<u8>, suffix: &str, with: &str, condition: impl Fn(&[u8]) -> bool) -> bool {
    if !w.ends_with(suffix.as_bytes()) {
        return false;
    }
    let stem_len = w.len() - suffix.len();
    if condition(&w[..stem_len]) {
        w.truncate(stem_len);
        w.extend_from_slice(with.as_bytes());
    }
    true
}

fn step_1a(w: &mut Vec<u8>) {
    let _ = replace(w, "sses", "ss", |_| true)
        || replace(w, "ies", "i", |_| true)
        || replace(w, "ss", "ss", |_| true)
        || replace(w, "s", "", |_| true);
}

fn step_1b(w: &mut Vec<u8>) {
    if w.ends_with(b"eed") {
        let _ = replace(w, "eed", "ee", |s| measure(s) > 0);
        return;
    }
    let removed = ["ed", "ing"].iter().any(|suffix| {
        let suffix = suffix.as_bytes();
        if w.ends_with(suffix) && has_vowel(&w[..w.len() - suffix.len()]) {
            w.truncate(w.len() - suffix.len());
            true
        } else {
            false
        }
    });
    if !removed {
        return;
    }
    if w.ends_with(b"at") || w.ends_with(b"bl") || w.ends_with(b"iz") {
        w.push(b'e');
    } else if ends_double_consonant(w) && !matches!(w[w.len() - 1], b'l' | b's' | b'z') {
        w.pop();
    } else if measure(w) == 1 && ends_cvc(w) {
        w.push(b'e');
    }
}

fn step_1c(w: &mut [u8]) {
    let n = w.len();
    if w[n - 1] == b'y' && has_vowel(&w[..n - 1]) {
        w[n - 1] = b'i';
    }
}

fn first_rule(w: &mut Vec<u8>, rules: &[(&str, &str)], min_measure: usize) {
    for (suffix, with) in rules {
        if replace(w, suffix, with, |s| measure(s) > min_measure) {
            return;
        }
    }
}

fn step_2(w: &mut Vec<u8>) {
    const RULES: &[(&str, &str)] = &[
        ("ational", "ate"),
        ("tional", "tion"),
        ("enci", "ence"),
        ("anci", "ance"),
        ("izer", "ize"),
        ("abli", "able"),
        ("alli", "al"),
        ("entli", "ent"),
        ("eli", "e"),
        ("ousli", "ous"),
        ("ization", "ize"),
        ("ation", "ate"),
        ("ator", "ate"),
        ("alism", "al"),
        ("iveness", "ive"),
        ("fulness", "ful"),
        ("ousness", "ous"),
        ("aliti", "al"),
        ("iviti", "ive"),
        ("biliti", "ble"),
    ];
    first_rule(w, RULES, 0);
}

fn step_3(w: &mut Vec<u8>) {
    const RULES: &[(&str, &str)] = &[
        ("icate", "ic"),
        ("ative", ""),
        ("alize", "al"),
        ("iciti", "ic"),
        ("ical", "ic"),
        ("ful", ""),
        ("ness", ""),
    ];
    first_rule(w, RULES, 0);
}

fn step_4(w: &mut Vec<u8>) {
    const SUFFIXES: &[&str] = &[
        "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion",
        "ou", "ism", "ate", "iti", "ous", "ive", "ize",
    ];
    // Longest suffix first, as Porter's table is read.
    let mut by_length: Vec<&str> = SUFFIXES.to_vec();
    by_length.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for suffix in by_length {
        if !w.ends_with(suffix.as_bytes()) {
            continue;
        }
        let stem_len = w.len() - suffix.len();
        let stem = &w[..stem_len];
        let ok = measure(stem) > 1 && (suffix != "ion" || matches!(stem.last(), Some(b's' | b't')));
        if ok {
            w.truncate(stem_len);
        }
        return;
    }
}

fn step_5(w: &mut Vec<u8>) {
    let n = w.len();
    if w[n - 1] == b'e' {
        let m = measure(&w[..n - 1]);
        if m > 1 || (m == 1 && !ends_cvc(&w[..n - 1])) {
            w.pop();
        }
    }
    if measure(w) > 1 && ends_double_consonant(w) && w[w.len() - 1] == b'l' {
        w.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_for_the_binary_search() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn words_split_at_case_changes_and_punctuation() {
        let split: Vec<&str> = words("getFileInfo HTTPServer list_prs, API-v2 über").collect();
        assert_eq!(
            split,
            [
                "get", "File", "Info", "HTTP", "Server", "list", "prs", "API", "v2", "über"
            ]
        );
    }

    #[test]
    fn porter_stems_known_words() {
        for (word, stemmed) in [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("listing", "list"),
            ("listed", "list"),
            ("lists", "list"),
            ("hopping", "hop"),
            ("hoping", "hope"),
            ("relational", "relat"),
            ("generalization", "gener"),
            ("directories", "directori"),
            ("directory", "directori"),
            ("screenshots", "screenshot"),
            ("queries", "queri"),
            ("query", "queri"),
            ("adjustable", "adjust"),
            ("controll", "control"),
        ] {
            assert_eq!(stem(word), stemmed, "{word}");
        }
    }

    #[test]
    fn terms_drop_stop_words_and_stem() {
        let t: Vec<String> = terms("I want to list the open Pull Requests").collect();
        assert_eq!(t, ["list", "open", "pull", "request"]);
    }
}
