//! find_tools' tokenizer: words split at anything but letters and digits and at case
//! changes (`getFileInfo`, `HTTPServer`), lower-cased, English stop words dropped, and
//! each word reduced to its stem (Snowball's English algorithm), so `listing`, `lists`
//! and `listed` are one term.

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

/// Snowball's English stemmer (Porter2, `rust-stemmers`), on a lower-case word. The
/// retrieval benchmark ranks alike with it and with Porter's 1980 algorithm, which this
/// crate used to carry by hand; the maintained one stays.
pub(crate) fn stem(word: &str) -> String {
    static STEMMER: std::sync::OnceLock<rust_stemmers::Stemmer> = std::sync::OnceLock::new();
    STEMMER
        .get_or_init(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English))
        .stem(word)
        .into_owned()
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
    fn words_of_one_family_share_a_stem() {
        for (word, stemmed) in [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("listing", "list"),
            ("listed", "list"),
            ("lists", "list"),
            ("hopping", "hop"),
            ("hoping", "hope"),
            ("directories", "directori"),
            ("directory", "directori"),
            ("screenshots", "screenshot"),
            ("queries", "queri"),
            ("query", "queri"),
            ("adjustable", "adjust"),
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
