//! find_tools' semantic side: a static embedding model (one vector per WordPiece token,
//! averaged) compiled into the binary, so a request phrased in other words than the
//! catalog's ("jot down that the deploy failed") still finds the tool that does it.
//!
//! The model is distilled from the sentence transformer all-MiniLM-L6-v2 by
//! `cargo xtask distill-model` (see `model/PROVENANCE.md`); nothing is downloaded at build
//! or run time. Text is split as the lexical side splits it (case changes, punctuation),
//! lower-cased, and cut into the model's WordPiece tokens (greedy longest match, `##`
//! continuations); a word the vocabulary cannot spell counts for nothing. Each token's row
//! already carries its weight (frequent tokens count less), so a text's vector is the
//! plain sum of its tokens' rows, normalised. Every sum runs in text order in `f32`, so
//! every replica computes the same vectors.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The committed model: tokens, one a line, row `i` of the table on line `i`.
const TOKENS: &str = include_str!("../model/tokens.txt");
/// The committed model's table (see [`StaticModel::parse`]).
const VECTORS: &[u8] = include_bytes!("../model/vectors.bin");
/// What the binary must say of the model it carries (its licence's notice).
pub const MODEL_NOTICE: &str = "find_tools ranks with a static embedding model distilled from \
sentence-transformers/all-MiniLM-L6-v2 (Copyright the sentence-transformers authors; \
Apache License 2.0, http://www.apache.org/licenses/LICENSE-2.0). Derived weights: 29523 \
tokens x 256 dimensions, int8; nothing is downloaded at build or run time.";
/// The file's first bytes.
const MAGIC: &[u8; 8] = b"CTXSEMB1";
/// Longer words are not split into tokens (WordPiece's own bound).
const MAX_WORD_CHARS: usize = 100;

/// A token table: per token an `i8` row and an `f32` scale (its weight included).
pub(crate) struct StaticModel {
    dims: usize,
    scales: Vec<f32>,
    values: &'static [u8],
    /// Whole-word tokens → row.
    starts: HashMap<&'static str, u32>,
    /// `##` continuation tokens, without the `##` → row.
    continuations: HashMap<&'static str, u32>,
}

/// The committed model, parsed on first use; `None` if it does not parse (find_tools then
/// ranks by words alone).
pub(crate) fn model() -> Option<&'static StaticModel> {
    static MODEL: OnceLock<Option<StaticModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| StaticModel::parse(TOKENS, VECTORS).ok())
        .as_ref()
}

impl StaticModel {
    /// Parses a table: the magic `CTXSEMB1`, `u32` rows, `u32` dims (little-endian), then
    /// `rows` `f32` scales, then `rows × dims` `i8` values, row-major; `tokens` holds one
    /// token a line for each row.
    pub(crate) fn parse(tokens: &'static str, bytes: &'static [u8]) -> Result<Self, String> {
        let rest = bytes
            .strip_prefix(MAGIC.as_slice())
            .ok_or("the table does not start with CTXSEMB1")?;
        let u32_at = |at: usize| -> Result<usize, String> {
            let field: [u8; 4] = rest
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .ok_or("the table's header is cut short")?;
            Ok(u32::from_le_bytes(field) as usize)
        };
        let (rows, dims) = (u32_at(0)?, u32_at(4)?);
        if dims == 0 {
            return Err("the table has no dimensions".into());
        }
        let body = &rest[8..];
        let scale_bytes = rows.checked_mul(4).ok_or("too many rows")?;
        let value_bytes = rows.checked_mul(dims).ok_or("too many rows")?;
        if body.len() != scale_bytes + value_bytes {
            return Err(format!(
                "the table holds {} bytes after its header, expected {}",
                body.len(),
                scale_bytes + value_bytes
            ));
        }
        let scales = body[..scale_bytes]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let lines: Vec<&'static str> = tokens.lines().collect();
        if lines.len() != rows {
            return Err(format!("{} tokens for {rows} rows", lines.len()));
        }
        let mut starts = HashMap::with_capacity(rows);
        let mut continuations = HashMap::new();
        for (row, token) in lines.into_iter().enumerate() {
            let row = u32::try_from(row).map_err(|_| "too many rows")?;
            match token.strip_prefix("##") {
                Some(rest) if !rest.is_empty() => continuations.insert(rest, row),
                _ => starts.insert(token, row),
            };
        }
        Ok(Self {
            dims,
            scales,
            values: &body[scale_bytes..],
            starts,
            continuations,
        })
    }

    /// The vector's length.
    pub(crate) fn dims(&self) -> usize {
        self.dims
    }

    /// Adds the sum of `text`'s token rows to `into` (of [`Self::dims`]); returns how
    /// many tokens it added.
    pub(crate) fn add(&self, text: &str, into: &mut [f32]) -> usize {
        let mut added = 0;
        let mut lower = String::new();
        for word in crate::terms::words(text) {
            lower.clear();
            lower.extend(word.chars().flat_map(char::to_lowercase));
            if lower.chars().count() > MAX_WORD_CHARS {
                continue;
            }
            self.word_pieces(&lower, |row| {
                let scale = self.scales[row as usize];
                let values = &self.values[row as usize * self.dims..][..self.dims];
                for (sum, &v) in into.iter_mut().zip(values) {
                    *sum += scale * f32::from(v as i8);
                }
                added += 1;
            });
        }
        added
    }

    /// Calls `each` with the rows of `word`'s WordPiece tokens, longest match first;
    /// nothing when some part of the word matches no token (WordPiece's `[UNK]`).
    fn word_pieces(&self, word: &str, mut each: impl FnMut(u32)) {
        let mut pieces: [u32; 16] = [0; 16];
        let mut count = 0;
        let mut start = 0;
        while start < word.len() {
            let table = if start == 0 {
                &self.starts
            } else {
                &self.continuations
            };
            let mut end = word.len();
            let found = loop {
                if let Some(&row) = table.get(&word[start..end]) {
                    break Some(row);
                }
                // The previous char boundary.
                end = match word[start..end].char_indices().next_back() {
                    Some((at, _)) if at > 0 => start + at,
                    _ => break None,
                };
            };
            let Some(row) = found else {
                return;
            };
            if count == pieces.len() {
                // A word of more than 16 pieces is noise (a hash, an id).
                return;
            }
            pieces[count] = row;
            count += 1;
            start = end;
        }
        for &row in &pieces[..count] {
            each(row);
        }
    }
}

/// Scales `vector` to unit length; false (and unchanged) when it is zero.
pub(crate) fn normalise(vector: &mut [f32]) -> bool {
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        for v in vector.iter_mut() {
            *v /= norm;
        }
        true
    } else {
        false
    }
}

/// The dot product: eight running sums over the lanes (so the compiler can use vector
/// instructions), added up in one fixed order, so every replica gets the same bits.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-dimensional table: `file` and `##s` point one way, `note` the other.
    fn tiny() -> StaticModel {
        let mut bytes = MAGIC.to_vec();
        bytes.extend(3u32.to_le_bytes());
        bytes.extend(2u32.to_le_bytes());
        for scale in [1.0f32, 0.5, 2.0] {
            bytes.extend(scale.to_le_bytes());
        }
        for v in [100i8, 0, 100, 0, 0, 100] {
            bytes.push(v as u8);
        }
        StaticModel::parse("file\n##s\nnote\n", Box::leak(bytes.into_boxed_slice()))
            .expect("the tiny table parses")
    }

    #[test]
    fn words_are_cut_into_pieces_and_summed_with_their_weights() {
        let model = tiny();
        let mut v = vec![0.0; 2];
        assert_eq!(model.add("Files", &mut v), 2);
        assert_eq!(v, [150.0, 0.0]);
        let mut v = vec![0.0; 2];
        // `filez` has no spelling; `note` has.
        assert_eq!(model.add("filez NOTE", &mut v), 1);
        assert_eq!(v, [0.0, 200.0]);
    }

    #[test]
    fn a_malformed_table_is_refused_with_its_reason() {
        let err = StaticModel::parse("a\n", b"CTXSEMB1\x01\0\0\0\x02\0\0\0").err();
        assert!(err.is_some_and(|e| e.contains("expected 6")), "cut body");
        let err = StaticModel::parse("a\n", b"nope").err();
        assert!(err.is_some_and(|e| e.contains("CTXSEMB1")));
    }

    /// CI never distils the model again; it checks that what is compiled in is what
    /// the distillation recorded.
    #[test]
    fn the_compiled_model_is_the_distilled_one() {
        use sha2::{Digest, Sha256};
        let sums = include_str!("../model/SHA256SUMS");
        for (file, bytes) in [("tokens.txt", TOKENS.as_bytes()), ("vectors.bin", VECTORS)] {
            let digest: String = Sha256::digest(bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let recorded = sums
                .lines()
                .find_map(|l| l.strip_suffix(file)?.trim_end().strip_suffix(""))
                .unwrap_or_else(|| panic!("SHA256SUMS lists {file}"));
            assert_eq!(digest, recorded.trim(), "{file}");
        }
    }

    #[test]
    fn the_committed_model_parses_and_knows_common_words() {
        let model = model().expect("the committed model parses");
        assert!(model.dims() > 0 && model.dims() <= 256);
        let mut v = vec![0.0; model.dims()];
        assert!(model.add("remember this observation", &mut v) >= 3);
        assert!(normalise(&mut v));
    }
}
