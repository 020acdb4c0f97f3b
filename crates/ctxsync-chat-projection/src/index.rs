//! What find_tools knows of one catalog, built once and reused ([`ToolIndex`]), and a
//! cache of such indexes bounded in bytes ([`ToolIndexCache`]), so every find_tools call
//! and turn on a snapshot a replica has seen ranks without reading tool text again.
//!
//! An index holds the lexical index (BM25F, [`crate::rank`]) and, with the `semantic`
//! feature (a default), one unit vector per tool from the compiled-in static embedding
//! model. A cache entry is keyed by a SHA-256 of exactly the text the index reads, so a
//! new snapshot whose tools changed gets a new index, and agents publishing the same
//! servers share one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::naming::{EligibleTool, ToolCatalog};
use crate::rank::LexicalIndex;
use crate::text::one_line;
use ctxsync_protocol::encoded_size::truncate_to_boundary;

/// The default bound of a [`ToolIndexCache`]: 64 MiB, a few hundred 1000-tool catalogs.
pub const DEFAULT_INDEX_CACHE_BYTES: usize = 64 << 20;

/// find_tools' index of one catalog. Build it with [`ToolIndex::build`] (or take it from
/// a [`ToolIndexCache`]) and search with [`crate::find_tools_in`]; it must be searched
/// only with the catalog it was built from (a different one is detected and indexed
/// anew).
pub struct ToolIndex {
    /// A cheap hash of the tools' names, in order: what a search checks its catalog by.
    names: u64,
    tools: usize,
    pub(crate) lexical: LexicalIndex,
    /// Each tool's model-facing name, original name and title, lower-cased → the tools
    /// (catalog positions) so named: a query that is exactly one finds it first.
    phrases: HashMap<Box<str>, Vec<usize>>,
    #[cfg(feature = "semantic")]
    pub(crate) semantic: Option<SemanticIndex>,
}

impl std::fmt::Debug for ToolIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolIndex")
            .field("tools", &self.tools)
            .field("heap_bytes", &self.heap_bytes())
            .field("semantic", &self.is_semantic())
            .finish_non_exhaustive()
    }
}

impl ToolIndex {
    /// Indexes every tool of `catalog`.
    pub fn build(catalog: &ToolCatalog) -> Self {
        Self {
            names: names_hash(catalog),
            tools: catalog.len(),
            lexical: LexicalIndex::build(catalog),
            phrases: phrases(catalog),
            #[cfg(feature = "semantic")]
            semantic: SemanticIndex::build(catalog),
        }
    }

    /// True when requests phrased in other words are ranked by the embedding model too;
    /// false without the `semantic` feature.
    pub fn is_semantic(&self) -> bool {
        #[cfg(feature = "semantic")]
        return self.semantic.is_some();
        #[cfg(not(feature = "semantic"))]
        false
    }

    /// Roughly the bytes the index holds.
    pub fn heap_bytes(&self) -> usize {
        #[cfg(feature = "semantic")]
        let semantic = self.semantic.as_ref().map_or(0, SemanticIndex::heap_bytes);
        #[cfg(not(feature = "semantic"))]
        let semantic = 0;
        let phrases: usize = self
            .phrases
            .iter()
            .map(|(p, tools)| 48 + p.len() + tools.len() * 8)
            .sum();
        size_of::<Self>() + self.lexical.heap_bytes() + phrases + semantic
    }

    /// The tools (catalog positions) whose name, original name or title, lower-cased, is
    /// `phrase`.
    pub(crate) fn whole_names(&self, phrase: &str) -> &[usize] {
        self.phrases.get(phrase).map_or(&[], Vec::as_slice)
    }

    /// True when the index was built from `catalog`: the same tools under the same names
    /// in the same order. (Hashing all their text would cost as much as the search; a
    /// cache keys indexes by all of it.)
    pub(crate) fn fits(&self, catalog: &ToolCatalog) -> bool {
        self.tools == catalog.len() && self.names == names_hash(catalog)
    }
}

/// Only this much of a title is compared with a whole query.
const MAX_PHRASE_TITLE_BYTES: usize = 512;

fn phrases(catalog: &ToolCatalog) -> HashMap<Box<str>, Vec<usize>> {
    let mut phrases: HashMap<Box<str>, Vec<usize>> = HashMap::new();
    for (i, tool) in catalog.iter().enumerate() {
        let title = one_line(truncate_to_boundary(&tool.title, MAX_PHRASE_TITLE_BYTES));
        for text in [tool.name.as_str(), tool.tool.as_str(), title.as_str()] {
            let tools = phrases
                .entry(text.to_lowercase().into_boxed_str())
                .or_default();
            if tools.last() != Some(&i) {
                tools.push(i);
            }
        }
    }
    phrases
}

/// FNV-1a over each tool's model-facing name and a separator.
fn names_hash(catalog: &ToolCatalog) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for tool in catalog {
        for &b in tool.name.as_bytes().iter().chain(&[0]) {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// SHA-256 of everything an index reads of `catalog`, each text length-prefixed.
fn catalog_digest(catalog: &ToolCatalog) -> [u8; 32] {
    let mut hash = Sha256::new();
    let mut text = |t: &str| {
        hash.update((t.len() as u64).to_le_bytes());
        hash.update(t.as_bytes());
    };
    for tool in catalog {
        for_each_indexed_text(tool, &mut text);
    }
    hash.finalize().into()
}

/// Every text of `tool` an index reads (a superset, cut at the widest limit).
fn for_each_indexed_text(tool: &EligibleTool, text: &mut impl FnMut(&str)) {
    text(&tool.name);
    text(&tool.server);
    text(&tool.tool);
    text(truncate_to_boundary(&tool.title, 4096));
    text(truncate_to_boundary(&tool.description, 4096));
    text(truncate_to_boundary(&tool.server_instructions, 4096));
    for (name, description) in crate::rank::parameters(tool) {
        text(name);
        text(description.unwrap_or("\u{0}"));
    }
}

/// Indexes shared by every find_tools call and turn on one replica: at most `max_bytes`
/// of them (by [`ToolIndex::heap_bytes`]), the least recently used dropped first. An
/// index larger than the whole bound is built, used and not kept.
pub struct ToolIndexCache {
    max_bytes: usize,
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    /// Digest → the index, when it was last used (`clock`) and its bytes as counted in.
    entries: HashMap<[u8; 32], (Arc<ToolIndex>, u64, usize)>,
    bytes: usize,
    clock: u64,
    builds: u64,
}

impl std::fmt::Debug for ToolIndexCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("ToolIndexCache")
            .field("max_bytes", &self.max_bytes)
            .field("entries", &state.entries.len())
            .field("bytes", &state.bytes)
            .finish()
    }
}

impl Default for ToolIndexCache {
    fn default() -> Self {
        Self::new(DEFAULT_INDEX_CACHE_BYTES)
    }
}

impl ToolIndexCache {
    /// A cache holding at most `max_bytes` of indexes.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            state: Mutex::default(),
        }
    }

    /// The index of `catalog`: the cached one when its text was indexed before, else a
    /// new one (built outside the lock, so a build never blocks other catalogs' lookups).
    pub fn index(&self, catalog: &ToolCatalog) -> Arc<ToolIndex> {
        let digest = catalog_digest(catalog);
        {
            let mut state = self.lock();
            state.clock += 1;
            let now = state.clock;
            if let Some((index, used, _)) = state.entries.get_mut(&digest) {
                *used = now;
                return Arc::clone(index);
            }
        }
        let index = Arc::new(ToolIndex::build(catalog));
        let size = index.heap_bytes();
        let mut state = self.lock();
        state.builds += 1;
        if size > self.max_bytes {
            return index;
        }
        state.clock += 1;
        let now = state.clock;
        if let Some((kept, used, _)) = state.entries.get_mut(&digest) {
            // Another caller built it meanwhile: keep one.
            *used = now;
            return Arc::clone(kept);
        }
        while state.bytes + size > self.max_bytes {
            let Some(oldest) = state
                .entries
                .iter()
                .min_by_key(|(_, (_, used, _))| *used)
                .map(|(key, _)| *key)
            else {
                break;
            };
            if let Some((_, _, bytes)) = state.entries.remove(&oldest) {
                state.bytes -= bytes;
            }
        }
        state.bytes += size;
        state
            .entries
            .insert(digest, (Arc::clone(&index), now, size));
        index
    }

    /// (indexes held, their bytes, indexes built since the cache was made).
    pub fn stats(&self) -> (usize, usize, u64) {
        let state = self.lock();
        (state.entries.len(), state.bytes, state.builds)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // The state is consistent between statements; a panic elsewhere cannot break it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Per tool, a unit vector from the static embedding model (zero when the model knows
/// none of its words).
#[cfg(feature = "semantic")]
pub(crate) struct SemanticIndex {
    dims: usize,
    /// `vectors[tool * dims..][..dims]`.
    vectors: Vec<f32>,
}

/// How much each text of a tool counts in its vector.
#[cfg(feature = "semantic")]
const NAME_WEIGHT: f32 = 1.0;
#[cfg(feature = "semantic")]
const TITLE_WEIGHT: f32 = 1.0;
#[cfg(feature = "semantic")]
const DESCRIPTION_WEIGHT: f32 = 1.0;
#[cfg(feature = "semantic")]
const PARAMETERS_WEIGHT: f32 = 0.3;
/// Only this much of a description is embedded: its opening says what the tool does.
#[cfg(feature = "semantic")]
const MAX_EMBEDDED_DESCRIPTION_BYTES: usize = 1024;

#[cfg(feature = "semantic")]
impl SemanticIndex {
    fn build(catalog: &ToolCatalog) -> Option<Self> {
        let model = crate::embed::model()?;
        let dims = model.dims();
        let mut vectors = vec![0f32; catalog.len() * dims];
        let mut field = vec![0f32; dims];
        for (tool, vector) in catalog.iter().zip(vectors.chunks_exact_mut(dims)) {
            let mut add = |text: &str, weight: f32| {
                field.fill(0.0);
                if model.add(text, &mut field) > 0 && crate::embed::normalise(&mut field) {
                    for (v, f) in vector.iter_mut().zip(&field) {
                        *v += weight * f;
                    }
                }
            };
            add(&tool.tool, NAME_WEIGHT);
            add(truncate_to_boundary(&tool.title, 512), TITLE_WEIGHT);
            add(
                truncate_to_boundary(&tool.description, MAX_EMBEDDED_DESCRIPTION_BYTES),
                DESCRIPTION_WEIGHT,
            );
            let names: Vec<&str> = crate::rank::parameters(tool).map(|(n, _)| n).collect();
            add(&names.join(" "), PARAMETERS_WEIGHT);
            crate::embed::normalise(vector);
        }
        Some(Self { dims, vectors })
    }

    /// The query's cosine with each tool (`None` when the model knows none of its words).
    pub(crate) fn similarities(&self, query: &str) -> Option<Vec<f32>> {
        let model = crate::embed::model()?;
        let mut vector = vec![0f32; self.dims];
        if model.add(query, &mut vector) == 0 || !crate::embed::normalise(&mut vector) {
            return None;
        }
        Some(
            self.vectors
                .chunks_exact(self.dims)
                .map(|tool| crate::embed::dot(tool, &vector))
                .collect(),
        )
    }

    fn heap_bytes(&self) -> usize {
        self.vectors.len() * 4
    }
}
