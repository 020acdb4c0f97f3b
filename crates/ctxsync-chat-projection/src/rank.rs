//! find_tools' ranking: BM25F (BM25 over weighted fields) of a request's terms against
//! every eligible tool, computed per call from the catalog alone (no cache, no model).
//!
//! Fields, most telling first: the tool's name, its title, its parameters' names, its
//! server's name, its description, its parameters' descriptions and its server's
//! instructions. A term matches a word with the same stem; a longer word it begins (a
//! term of four letters or more: `calend` finds `calendar`) at a fraction of the weight;
//! and a term of two to four letters matches the initials of as many consecutive words
//! (`pr` finds `pull_request`). Document frequencies and field lengths come from the whole
//! catalog, so a word every tool has (`file` in a file server) counts little.
//!
//! Work is bounded: each field is read up to a byte limit, at most
//! [`MAX_INDEXED_PARAMETERS`] parameters, and a word is stemmed only when its first
//! letters could make it one of the request's terms.

use std::collections::HashMap;

use crate::naming::{EligibleTool, ToolCatalog};
use crate::terms::stem;
use crate::text::prefix_within_bytes;

/// Only this much of each description, title and server instructions, and this many
/// parameters (each description cut too), are read.
const MAX_INDEXED_DESCRIPTION_BYTES: usize = 2048;
const MAX_INDEXED_TITLE_BYTES: usize = 512;
const MAX_INDEXED_INSTRUCTIONS_BYTES: usize = 2048;
const MAX_INDEXED_PARAMETERS: usize = 64;
const MAX_INDEXED_PARAMETER_DESCRIPTION_BYTES: usize = 512;

/// BM25's saturation.
const K1: f32 = 1.2;
/// A match on a longer word the term begins counts this much of an exact one.
const PREFIX_MATCH: f32 = 0.4;
/// Terms at least this long match the start of longer words.
const MIN_PREFIX_TERM_LEN: usize = 4;
/// Terms this long match initials of consecutive words.
const ACRONYM_LENS: std::ops::RangeInclusive<usize> = 2..=4;

/// (weight, length normalisation b) of each field, in [`Field`] order.
const FIELDS: [(f32, f32); FIELD_COUNT] = [
    (3.0, 0.3),  // name
    (2.5, 0.3),  // title
    (1.5, 0.3),  // parameter names
    (1.5, 0.0),  // server name
    (1.0, 0.75), // description
    (0.5, 0.75), // parameter descriptions
    (0.2, 0.75), // server instructions
];
const FIELD_COUNT: usize = 7;
/// The server instructions' index in [`FIELDS`].
const INSTRUCTIONS_FIELD: usize = 6;

/// One term of a request: its stem, and the bytes any word must begin with to stem to it.
pub(crate) struct Term {
    stem: String,
    /// The stem less its last two letters (Porter changes at most that much of an
    /// ending), but at least three letters (or the whole of a shorter stem), so short
    /// terms do not stem every word sharing their first letter. A word whose stem ends
    /// more than two letters away from its own start (rare: `try` → `tri`) is missed
    /// by a term that short.
    lead: String,
    /// For a term of [`ACRONYM_LENS`] letters: its letters packed as word initials are,
    /// and the mask of that many initials.
    acronym: Option<(u32, u32)>,
}

impl Term {
    pub(crate) fn new(stem: String) -> Self {
        let keep = stem.len().saturating_sub(2).max(3);
        let mut end = keep.min(stem.len());
        while !stem.is_char_boundary(end) {
            end -= 1;
        }
        // The initials as `Matcher::read` packs them: last letter lowest.
        let acronym = (ACRONYM_LENS.contains(&stem.len())
            && stem.bytes().all(|b| b.is_ascii_lowercase()))
        .then(|| {
            let code = stem.bytes().fold(0u32, |acc, b| (acc << 8) | u32::from(b));
            let mask = u32::MAX >> (8 * (4 - stem.len()));
            (code, mask)
        });
        Self {
            lead: stem[..end].to_owned(),
            acronym,
            stem,
        }
    }

    pub(crate) fn stem(&self) -> &str {
        &self.stem
    }
}

/// Per tool, per term, the BM25F weighted frequency; and per term the IDF.
pub(crate) struct Scores {
    /// `weighted[tool * terms + term]`, tools in catalog order.
    weighted: Vec<f32>,
    idf: Vec<f32>,
    terms: usize,
}

impl Scores {
    /// Reads every tool of `catalog` once for all of `terms`.
    pub(crate) fn new(catalog: &ToolCatalog, terms: &[Term]) -> Self {
        let n = catalog.len();
        let t = terms.len();
        let mut frequency = vec![0f32; n * t * FIELD_COUNT];
        let mut lengths = vec![0u32; n * FIELD_COUNT];
        if t > 0 {
            let mut matcher = Matcher::new(terms);
            // A server's instructions are the same text for each of its tools: read once
            // per server, the counts shared.
            let mut instructions: HashMap<&str, (Vec<f32>, u32)> = HashMap::new();
            for (i, tool) in catalog.iter().enumerate() {
                for_each_field(tool, |field, text| {
                    let counts = &mut frequency[(i * FIELD_COUNT + field) * t..][..t];
                    lengths[i * FIELD_COUNT + field] += matcher.read(text, counts);
                });
                let (counts, length) = instructions
                    .entry(&*tool.server_instructions)
                    .or_insert_with(|| {
                        let mut counts = vec![0f32; t];
                        let text = prefix_within_bytes(
                            &tool.server_instructions,
                            MAX_INDEXED_INSTRUCTIONS_BYTES,
                        );
                        let length = matcher.read(text, &mut counts);
                        (counts, length)
                    });
                let field = INSTRUCTIONS_FIELD;
                frequency[(i * FIELD_COUNT + field) * t..][..t].copy_from_slice(counts);
                lengths[i * FIELD_COUNT + field] = *length;
            }
        }
        let mut average = [0f32; FIELD_COUNT];
        for (f, avg) in average.iter_mut().enumerate() {
            let total: u64 = (0..n)
                .map(|i| u64::from(lengths[i * FIELD_COUNT + f]))
                .sum();
            *avg = (total as f32 / n.max(1) as f32).max(1.0);
        }
        let mut weighted = vec![0f32; n * t];
        let mut document_frequency = vec![0u32; t];
        for i in 0..n {
            for term in 0..t {
                let mut sum = 0.0;
                for (f, (weight, b)) in FIELDS.iter().enumerate() {
                    let tf = frequency[(i * FIELD_COUNT + f) * t + term];
                    if tf > 0.0 {
                        let length = lengths[i * FIELD_COUNT + f] as f32;
                        sum += weight * tf / (1.0 - b + b * length / average[f]);
                    }
                }
                if sum > 0.0 {
                    document_frequency[term] += 1;
                }
                weighted[i * t + term] = sum;
            }
        }
        let idf = document_frequency
            .iter()
            .map(|&df| (1.0 + (n as f32 - df as f32 + 0.5) / (df as f32 + 0.5)).ln())
            .collect();
        Self {
            weighted,
            idf,
            terms: t,
        }
    }

    /// The BM25F score of the tool at catalog position `tool` for `terms` (indices into
    /// the request's terms), and how many of them it matched.
    pub(crate) fn score(&self, tool: usize, terms: &[usize]) -> (usize, f32) {
        let mut matched = 0;
        let mut score = 0.0;
        for &term in terms {
            let tf = self.weighted[tool * self.terms + term];
            if tf > 0.0 {
                matched += 1;
                score += self.idf[term] * tf * (K1 + 1.0) / (tf + K1);
            }
        }
        (matched, score)
    }
}

/// Calls `read(field, text)` for each searchable text of `tool` but its server's
/// instructions, within the byte limits.
fn for_each_field(tool: &EligibleTool, mut read: impl FnMut(usize, &str)) {
    read(0, &tool.tool);
    read(1, prefix_within_bytes(&tool.title, MAX_INDEXED_TITLE_BYTES));
    if let Some(properties) = tool
        .input_schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
    {
        for (name, schema) in properties.iter().take(MAX_INDEXED_PARAMETERS) {
            read(2, name);
            if let Some(text) = schema
                .get("description")
                .and_then(serde_json::Value::as_str)
            {
                read(
                    5,
                    prefix_within_bytes(text, MAX_INDEXED_PARAMETER_DESCRIPTION_BYTES),
                );
            }
        }
    }
    read(3, &tool.server);
    read(
        4,
        prefix_within_bytes(&tool.description, MAX_INDEXED_DESCRIPTION_BYTES),
    );
    // The server's instructions (field 6) are read once per server by `Scores::new`.
}

/// Matches words against a request's terms, reusing its buffers.
struct Matcher<'t> {
    terms: &'t [Term],
    /// For each ASCII byte, the terms (bits) whose lead begins with it, lower-cased.
    by_first: [u32; 128],
    /// The terms that also match initials.
    acronyms: u32,
    /// Every term: what a word beginning with a non-ASCII char is compared with.
    all: u32,
    lower: String,
}

impl<'t> Matcher<'t> {
    /// At most 32 terms (a request holds at most `MAX_TERMS`).
    fn new(terms: &'t [Term]) -> Self {
        assert!(terms.len() <= 32, "a request holds at most 32 terms");
        let mut by_first = [0u32; 128];
        let mut acronyms = 0;
        for (i, term) in terms.iter().enumerate() {
            if let Some(&b) = term.lead.as_bytes().first()
                && b < 0x80
            {
                by_first[usize::from(b)] |= 1 << i;
            }
            if term.acronym.is_some() {
                acronyms |= 1 << i;
            }
        }
        Self {
            terms,
            by_first,
            acronyms,
            all: u32::MAX >> (32 - terms.len().max(1)),
            lower: String::new(),
        }
    }

    /// Adds each term's matches in `text` to `counts` and returns how many words it has.
    fn read(&mut self, text: &str, counts: &mut [f32]) -> u32 {
        let mut length = 0;
        // Initials of the latest four words, one byte each, newest lowest.
        let mut initials: u32 = 0;
        for word in crate::terms::words(text) {
            length += 1;
            let first = word.as_bytes()[0].to_ascii_lowercase();
            initials = (initials << 8) | u32::from(first);
            let mut acronyms = self.acronyms;
            while acronyms != 0 {
                let i = acronyms.trailing_zeros() as usize;
                acronyms &= acronyms - 1;
                if let Some((code, mask)) = self.terms[i].acronym
                    && initials & mask == code
                {
                    counts[i] += 1.0;
                }
            }
            let mut candidates = if first < 0x80 {
                self.by_first[usize::from(first)]
            } else {
                self.all
            };
            if candidates == 0 {
                continue;
            }
            let ascii = word.is_ascii();
            let mut lowered = false;
            let mut stemmed: Option<String> = None;
            while candidates != 0 {
                let i = candidates.trailing_zeros() as usize;
                candidates &= candidates - 1;
                let term = &self.terms[i];
                if ascii {
                    let lead = term.lead.as_bytes();
                    if word.len() < lead.len()
                        || !word.as_bytes()[..lead.len()].eq_ignore_ascii_case(lead)
                    {
                        continue;
                    }
                }
                if !lowered {
                    self.lower.clear();
                    self.lower.extend(word.chars().flat_map(char::to_lowercase));
                    lowered = true;
                }
                let stem = stemmed.get_or_insert_with(|| stem(&self.lower));
                if *stem == term.stem {
                    counts[i] += 1.0;
                } else if term.stem.len() >= MIN_PREFIX_TERM_LEN
                    && self.lower.len() > term.stem.len()
                    && self.lower.starts_with(&term.stem)
                {
                    counts[i] += PREFIX_MATCH;
                }
            }
        }
        length
    }
}
