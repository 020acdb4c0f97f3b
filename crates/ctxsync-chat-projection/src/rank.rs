//! find_tools' lexical ranking: BM25F (BM25 over weighted fields) of a request's terms
//! against every eligible tool, over an index built once per catalog ([`LexicalIndex`]),
//! so a search never reads tool text again.
//!
//! Fields, most telling first: the tool's name, its title, its parameters' names, its
//! server's name, its description, its parameters' descriptions and its server's
//! instructions. A term matches a word with the same stem; a longer word it begins (a
//! term of four letters or more: `calend` finds `calendar`) at a fraction of the weight;
//! and a term of two to four letters matches the initials of as many consecutive words
//! (`pr` finds `pull_request`). Document frequencies and field lengths come from the whole
//! catalog, so a word every tool has (`file` in a file server) counts little.
//!
//! Work is bounded: each field is read up to a byte limit, and at most
//! [`MAX_INDEXED_PARAMETERS`] parameters. The index holds each distinct word once, with
//! its stem and where it occurs, so a term is matched against the catalog's vocabulary,
//! not its text.

use std::collections::HashMap;

use crate::naming::{EligibleTool, ToolCatalog};
use crate::terms::stem;
use ctxsync_protocol::encoded_size::truncate_to_boundary;

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

/// One term of a request: its stem, and its letters as initials when it could be an
/// acronym.
pub(crate) struct Term {
    stem: String,
    /// For a term of [`ACRONYM_LENS`] ASCII letters: its letters packed as
    /// [`LexicalIndex::build`] packs word initials (last letter lowest).
    acronym: Option<u32>,
}

impl Term {
    pub(crate) fn new(stem: String) -> Self {
        let acronym = (ACRONYM_LENS.contains(&stem.len())
            && stem.bytes().all(|b| b.is_ascii_lowercase()))
        .then(|| stem.bytes().fold(0u32, |acc, b| (acc << 8) | u32::from(b)));
        Self { stem, acronym }
    }

    pub(crate) fn stem(&self) -> &str {
        &self.stem
    }
}

/// Where a word (or a run of initials) occurs: a tool, one of its fields, how often.
#[derive(Clone, Copy)]
struct Posting {
    tool: u32,
    field: u8,
    count: u16,
}

/// A distinct lower-cased word of the catalog and where it occurs.
struct Word {
    text: Box<str>,
    postings: Vec<Posting>,
}

/// BM25F's view of one catalog: every field's length per tool, and every distinct word
/// with its stem and postings. Built once per catalog; answers any number of requests.
pub(crate) struct LexicalIndex {
    tools: usize,
    /// `lengths[tool * FIELD_COUNT + field]`: words in that field.
    lengths: Vec<u32>,
    average: [f32; FIELD_COUNT],
    /// Sorted by text, so the words a term begins are one run.
    words: Vec<Word>,
    /// Stem → the words (indices into `words`) with it.
    by_stem: HashMap<Box<str>, Vec<u32>>,
    /// Initials of two to four consecutive ASCII words, packed (last lowest) → where.
    initials: HashMap<u32, Vec<Posting>>,
}

impl LexicalIndex {
    /// Reads every tool of `catalog` once.
    pub(crate) fn build(catalog: &ToolCatalog) -> Self {
        let mut builder = Builder::default();
        let mut lengths = vec![0u32; catalog.len() * FIELD_COUNT];
        for (i, tool) in catalog.iter().enumerate() {
            let tool_id = u32::try_from(i).expect("a catalog holds fewer than 2^32 tools");
            for_each_field(tool, |field, text| {
                lengths[i * FIELD_COUNT + field] += builder.read(tool_id, field, text);
            });
            // A server's instructions are the same text for each of its tools: read once
            // per distinct text, the counts copied.
            let instructions =
                truncate_to_boundary(&tool.server_instructions, MAX_INDEXED_INSTRUCTIONS_BYTES);
            lengths[i * FIELD_COUNT + INSTRUCTIONS_FIELD] =
                builder.read_shared(tool_id, INSTRUCTIONS_FIELD, instructions);
        }
        let n = catalog.len();
        let mut average = [0f32; FIELD_COUNT];
        for (f, avg) in average.iter_mut().enumerate() {
            let total: u64 = (0..n)
                .map(|i| u64::from(lengths[i * FIELD_COUNT + f]))
                .sum();
            *avg = (total as f32 / n.max(1) as f32).max(1.0);
        }
        let mut words: Vec<Word> = builder
            .words
            .into_iter()
            .map(|(text, postings)| Word { text, postings })
            .collect();
        words.sort_unstable_by(|a, b| a.text.cmp(&b.text));
        let mut by_stem: HashMap<Box<str>, Vec<u32>> = HashMap::new();
        for (i, word) in words.iter().enumerate() {
            let id = u32::try_from(i).expect("fewer than 2^32 distinct words");
            by_stem
                .entry(stem(&word.text).into_boxed_str())
                .or_default()
                .push(id);
        }
        Self {
            tools: n,
            lengths,
            average,
            words,
            by_stem,
            initials: builder.initials,
        }
    }

    /// Words strictly longer than `stem` that begin with it (for a stem long enough).
    fn prefixed<'s>(&'s self, stem: &'s str) -> impl Iterator<Item = &'s Word> + 's {
        let start = if stem.len() >= MIN_PREFIX_TERM_LEN {
            self.words.partition_point(|w| &*w.text <= stem)
        } else {
            self.words.len()
        };
        self.words[start..]
            .iter()
            .take_while(move |w| w.text.starts_with(stem))
    }

    /// Per term, per tool (`scores[term][tool]`), the BM25F term score (idf × saturated
    /// weighted frequency); zero where the tool does not match.
    pub(crate) fn score_terms(&self, terms: &[Term]) -> Vec<Vec<f32>> {
        let n = self.tools;
        let mut frequency = vec![0f32; n * FIELD_COUNT];
        let mut touched: Vec<u32> = Vec::new();
        terms
            .iter()
            .map(|term| {
                let mut add = |postings: &[Posting], weight: f32| {
                    for p in postings {
                        let slot = &mut frequency[p.tool as usize * FIELD_COUNT + p.field as usize];
                        if *slot == 0.0 {
                            touched.push(p.tool);
                        }
                        *slot += weight * f32::from(p.count);
                    }
                };
                let exact = self.by_stem.get(term.stem.as_str());
                for &w in exact.into_iter().flatten() {
                    add(&self.words[w as usize].postings, 1.0);
                }
                for word in self.prefixed(&term.stem) {
                    // A word that stems to the term counted in full above.
                    if exact.is_none_or(|e| {
                        !e.iter()
                            .any(|&w| std::ptr::eq(&self.words[w as usize], word))
                    }) {
                        add(&word.postings, PREFIX_MATCH);
                    }
                }
                if let Some(postings) = term.acronym.and_then(|a| self.initials.get(&a)) {
                    add(postings, 1.0);
                }
                touched.sort_unstable();
                touched.dedup();
                let mut weighted = vec![0f32; n];
                for &tool in &touched {
                    let tool = tool as usize;
                    let mut sum = 0.0;
                    for (f, (weight, b)) in FIELDS.iter().enumerate() {
                        let slot = &mut frequency[tool * FIELD_COUNT + f];
                        let tf = std::mem::take(slot);
                        if tf > 0.0 {
                            let length = self.lengths[tool * FIELD_COUNT + f] as f32;
                            sum += weight * tf / (1.0 - b + b * length / self.average[f]);
                        }
                    }
                    weighted[tool] = sum;
                }
                let document_frequency = touched.len() as f32;
                touched.clear();
                let idf =
                    (1.0 + (n as f32 - document_frequency + 0.5) / (document_frequency + 0.5)).ln();
                for tf in &mut weighted {
                    if *tf > 0.0 {
                        *tf = idf * *tf * (K1 + 1.0) / (*tf + K1);
                    }
                }
                weighted
            })
            .collect()
    }

    /// Roughly the bytes the index holds, for a cache's budget.
    pub(crate) fn heap_bytes(&self) -> usize {
        let posting = size_of::<Posting>();
        let words: usize = self
            .words
            .iter()
            .map(|w| size_of::<Word>() + w.text.len() + w.postings.len() * posting)
            .sum();
        let stems: usize = self
            .by_stem
            .iter()
            .map(|(s, ids)| 48 + s.len() + ids.len() * 4)
            .sum();
        let initials: usize = self.initials.values().map(|p| 40 + p.len() * posting).sum();
        self.lengths.len() * 4 + words + stems + initials
    }
}

/// Gathers postings while the catalog is read.
#[derive(Default)]
struct Builder<'c> {
    words: HashMap<Box<str>, Vec<Posting>>,
    initials: HashMap<u32, Vec<Posting>>,
    lower: String,
    /// Per text read with [`Builder::read_shared`]: what its first reading counted.
    shared: HashMap<&'c str, Shared>,
    /// While a shared text is read the first time: the words and initials it counts.
    recording: Option<(Vec<Box<str>>, Vec<u32>)>,
}

/// A shared text's first reading: by which tool, its length, and the posting lists
/// (words, initials) it added to.
struct Shared {
    tool: u32,
    length: u32,
    words: Vec<Box<str>>,
    initials: Vec<u32>,
}

impl<'c> Builder<'c> {
    /// [`Builder::read`] for a text many tools share: read the first time, and for every
    /// later tool the first reading's counts copied, so it is tokenized once.
    fn read_shared(&mut self, tool: u32, field: usize, text: &'c str) -> u32 {
        let field_id = u8::try_from(field).expect("seven fields");
        if let Some(shared) = self.shared.get(text) {
            let copy = |postings: &mut Vec<Posting>| {
                // Postings are appended in tool order, so the first reader's are one run.
                let start = postings.partition_point(|p| p.tool < shared.tool);
                let count = postings[start..]
                    .iter()
                    .take_while(|p| p.tool == shared.tool)
                    .filter(|p| p.field == field_id)
                    .map(|p| p.count)
                    .fold(0u16, u16::saturating_add);
                postings.push(Posting {
                    tool,
                    field: field_id,
                    count,
                });
            };
            for word in &shared.words {
                if let Some(postings) = self.words.get_mut(word) {
                    copy(postings);
                }
            }
            for code in &shared.initials {
                if let Some(postings) = self.initials.get_mut(code) {
                    copy(postings);
                }
            }
            return shared.length;
        }
        self.recording = Some((Vec::new(), Vec::new()));
        let length = self.read(tool, field, text);
        let (mut words, mut initials) = self.recording.take().unwrap_or_default();
        words.sort_unstable();
        words.dedup();
        initials.sort_unstable();
        initials.dedup();
        self.shared.insert(
            text,
            Shared {
                tool,
                length,
                words,
                initials,
            },
        );
        length
    }

    /// Indexes `text` as `field` of `tool`; returns how many words it has.
    fn read(&mut self, tool: u32, field: usize, text: &str) -> u32 {
        let field = u8::try_from(field).expect("seven fields");
        let mut length = 0;
        // Initials of the latest four words, one byte each, newest lowest; how many of
        // them are ASCII letters in a row.
        let mut initials: u32 = 0;
        let mut letters = 0usize;
        for word in crate::terms::words(text) {
            length += 1;
            self.lower.clear();
            self.lower.extend(word.chars().flat_map(char::to_lowercase));
            let postings = match self.words.get_mut(self.lower.as_str()) {
                Some(postings) => postings,
                None => self
                    .words
                    .entry(self.lower.clone().into_boxed_str())
                    .or_default(),
            };
            bump(postings, tool, field);
            if let Some((words, _)) = &mut self.recording {
                words.push(self.lower.as_str().into());
            }
            let first = word.as_bytes()[0].to_ascii_lowercase();
            initials = (initials << 8) | u32::from(first);
            letters = if first.is_ascii_lowercase() {
                letters + 1
            } else {
                0
            };
            for len in ACRONYM_LENS {
                if letters >= len {
                    let code = initials & (u32::MAX >> (8 * (4 - len)));
                    bump(self.initials.entry(code).or_default(), tool, field);
                    if let Some((_, codes)) = &mut self.recording {
                        codes.push(code);
                    }
                }
            }
        }
        length
    }
}

/// Counts one more occurrence in `tool`'s `field`.
fn bump(postings: &mut Vec<Posting>, tool: u32, field: u8) {
    match postings.last_mut() {
        Some(last) if last.tool == tool && last.field == field => {
            last.count = last.count.saturating_add(1);
        }
        _ => postings.push(Posting {
            tool,
            field,
            count: 1,
        }),
    }
}

/// Calls `read(field, text)` for each searchable text of `tool` but its server's
/// instructions (read once per server by [`LexicalIndex::build`]), within the byte limits.
fn for_each_field(tool: &EligibleTool, mut read: impl FnMut(usize, &str)) {
    read(0, &tool.tool);
    read(
        1,
        truncate_to_boundary(&tool.title, MAX_INDEXED_TITLE_BYTES),
    );
    for (name, description) in parameters(tool) {
        read(2, name);
        if let Some(text) = description {
            read(5, text);
        }
    }
    read(3, &tool.server);
    read(
        4,
        truncate_to_boundary(&tool.description, MAX_INDEXED_DESCRIPTION_BYTES),
    );
}

/// The first [`MAX_INDEXED_PARAMETERS`] parameters of `tool`: each name, and its
/// description cut to [`MAX_INDEXED_PARAMETER_DESCRIPTION_BYTES`].
pub(crate) fn parameters(tool: &EligibleTool) -> impl Iterator<Item = (&str, Option<&str>)> {
    tool.input_schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
        .into_iter()
        .flat_map(|properties| properties.iter().take(MAX_INDEXED_PARAMETERS))
        .map(|(name, schema)| {
            let description = schema
                .get("description")
                .and_then(serde_json::Value::as_str)
                .map(|text| truncate_to_boundary(text, MAX_INDEXED_PARAMETER_DESCRIPTION_BYTES));
            (name.as_str(), description)
        })
}
