//! Hook points: the named places in the forward pass whose tensors can be captured, spelled as in
//! TransformerLens (`blocks.3.attn.hook_pattern`), with parsing, display and name filters.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// One capture point. Shapes are for a forward over `pos` new tokens (batch 1):
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookPoint {
    /// `hook_embed` — token embeddings, [pos, d_model].
    Embed,
    /// `blocks.{l}.hook_resid_pre` — residual stream entering block l, [pos, d_model].
    ResidPre(usize),
    /// `blocks.{l}.hook_resid_mid` — after the attention sub-block's residual add, [pos, d_model].
    ResidMid(usize),
    /// `blocks.{l}.hook_resid_post` — block l's output, [pos, d_model].
    ResidPost(usize),
    /// `blocks.{l}.ln1.hook_normalized` — the attention's normalised input (what the q|k|v
    /// projections read), [pos, d_model].
    AttnIn(usize),
    /// `blocks.{l}.attn.hook_q` — queries before RoPE, [pos, head, d_head].
    Q(usize),
    /// `blocks.{l}.attn.hook_k` — keys before RoPE, [pos, kv_head, d_head].
    K(usize),
    /// `blocks.{l}.attn.hook_v` — values, [pos, kv_head, d_head].
    V(usize),
    /// `blocks.{l}.attn.hook_attn_scores` — scaled pre-softmax scores, masked entries −∞,
    /// [head, query_pos, key_pos]; delivered in query blocks.
    AttnScores(usize),
    /// `blocks.{l}.attn.hook_pattern` — softmax attention, [head, query_pos, key_pos]; delivered
    /// in query blocks (rows = a range of query positions, columns = every visible key).
    Pattern(usize),
    /// `blocks.{l}.attn.hook_sink_prob` — the softmax mass each head's learned sink logit took
    /// (models with learned sinks only), [head, query_pos]; delivered in query blocks.
    SinkProb(usize),
    /// `blocks.{l}.attn.hook_gate` — σ(gate), each head's output gate (gated attention only:
    /// o_proj reads z · σ(gate)), [pos, head·d_head]; a gate near 0 is a head attending to nothing.
    Gate(usize),
    /// `blocks.{l}.attn.hook_z` — the heads' outputs side by side (what o_proj reads, before a
    /// gated model's gate), [pos, head·d_head]; in a linear-attention layer the heads' readings
    /// after the gated norm (what `out_proj` reads), [pos, v_head·d_v].
    Z(usize),
    /// `blocks.{l}.hook_attn_out` — attention sub-block output after o_proj, [pos, d_model].
    AttnOut(usize),
    /// `blocks.{l}.ln2.hook_normalized` — the MLP's normalised input (what gate|up or up read),
    /// [pos, d_model].
    MlpIn(usize),
    /// `blocks.{l}.mlp.hook_post` — the MLP's hidden activation (what the down projection reads),
    /// [pos, d_mlp].
    MlpPost(usize),
    /// `ln_final.hook_normalized` — final RMSNorm output, [pos, d_model].
    LnFinal,
}

/// The per-layer hook suffixes, in forward order.
const LAYER_HOOKS: [&str; 15] = [
    "hook_resid_pre",
    "ln1.hook_normalized",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_v",
    "attn.hook_attn_scores",
    "attn.hook_pattern",
    "attn.hook_sink_prob",
    "attn.hook_gate",
    "attn.hook_z",
    "hook_attn_out",
    "hook_resid_mid",
    "ln2.hook_normalized",
    "mlp.hook_post",
    "hook_resid_post",
];

impl HookPoint {
    pub fn layer(&self) -> Option<usize> {
        use HookPoint::*;
        match *self {
            Embed | LnFinal => None,
            ResidPre(l) | ResidMid(l) | ResidPost(l) | AttnIn(l) | Q(l) | K(l) | V(l) | AttnScores(l) | Pattern(l) | SinkProb(l) | Gate(l) | Z(l)
            | AttnOut(l) | MlpIn(l) | MlpPost(l) => Some(l),
        }
    }

    fn suffix(&self) -> &'static str {
        use HookPoint::*;
        match self {
            Embed => "hook_embed",
            LnFinal => "ln_final.hook_normalized",
            ResidPre(_) => LAYER_HOOKS[0],
            AttnIn(_) => LAYER_HOOKS[1],
            Q(_) => LAYER_HOOKS[2],
            K(_) => LAYER_HOOKS[3],
            V(_) => LAYER_HOOKS[4],
            AttnScores(_) => LAYER_HOOKS[5],
            Pattern(_) => LAYER_HOOKS[6],
            SinkProb(_) => LAYER_HOOKS[7],
            Gate(_) => LAYER_HOOKS[8],
            Z(_) => LAYER_HOOKS[9],
            AttnOut(_) => LAYER_HOOKS[10],
            ResidMid(_) => LAYER_HOOKS[11],
            MlpIn(_) => LAYER_HOOKS[12],
            MlpPost(_) => LAYER_HOOKS[13],
            ResidPost(_) => LAYER_HOOKS[14],
        }
    }

    fn from_layer_suffix(layer: usize, suffix: &str) -> Option<Self> {
        use HookPoint::*;
        Some(match suffix {
            "hook_resid_pre" => ResidPre(layer),
            "ln1.hook_normalized" => AttnIn(layer),
            "attn.hook_q" => Q(layer),
            "attn.hook_k" => K(layer),
            "attn.hook_v" => V(layer),
            "attn.hook_attn_scores" => AttnScores(layer),
            "attn.hook_pattern" => Pattern(layer),
            "attn.hook_sink_prob" => SinkProb(layer),
            "attn.hook_gate" => Gate(layer),
            "attn.hook_z" => Z(layer),
            "hook_attn_out" => AttnOut(layer),
            "hook_resid_mid" => ResidMid(layer),
            "ln2.hook_normalized" => MlpIn(layer),
            "mlp.hook_post" => MlpPost(layer),
            "hook_resid_post" => ResidPost(layer),
            _ => return None,
        })
    }

    /// Every hook of a model with `n_layers` blocks, in forward order.
    pub fn all(n_layers: usize) -> Vec<HookPoint> {
        let mut hooks = vec![HookPoint::Embed];
        for l in 0..n_layers {
            hooks.extend(LAYER_HOOKS.iter().filter_map(|s| HookPoint::from_layer_suffix(l, s)));
        }
        hooks.push(HookPoint::LnFinal);
        hooks
    }

    /// Whether this hook carries an attention-shaped [head, query, key] tensor.
    pub fn is_attention_map(&self) -> bool {
        matches!(self, HookPoint::Pattern(_) | HookPoint::AttnScores(_))
    }
}

impl fmt::Display for HookPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.layer() {
            Some(l) => write!(f, "blocks.{l}.{}", self.suffix()),
            None => f.write_str(self.suffix()),
        }
    }
}

impl FromStr for HookPoint {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let unknown = || {
            Error::input(format!("unknown hook name '{s}' (expected e.g. hook_embed, blocks.0.attn.hook_pattern, ln_final.hook_normalized; see `sinkscope capture --help`)"))
        };
        match s {
            "hook_embed" => return Ok(HookPoint::Embed),
            "ln_final.hook_normalized" => return Ok(HookPoint::LnFinal),
            _ => {}
        }
        let rest = s.strip_prefix("blocks.").ok_or_else(unknown)?;
        let (layer, suffix) = rest.split_once('.').ok_or_else(unknown)?;
        let layer: usize = layer.parse().map_err(|_| unknown())?;
        HookPoint::from_layer_suffix(layer, suffix).ok_or_else(unknown)
    }
}

/// A set of hook-name patterns: comma-separated, `*` matches any run of characters, and a pattern
/// without `blocks.` also matches as a suffix (so `hook_pattern` selects every layer's pattern).
#[derive(Debug, Clone, Default)]
pub struct HookFilter {
    patterns: Vec<String>,
}

impl HookFilter {
    /// Parses `spec` and checks every pattern selects at least one hook of a model with `n_layers`
    /// blocks, so a typo is an error rather than an empty capture.
    pub fn parse(spec: &str, n_layers: usize) -> Result<Self> {
        let patterns: Vec<String> = spec.split(',').map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect();
        if patterns.is_empty() {
            return Err(Error::input("--hooks is empty: give hook names or patterns such as 'blocks.*.attn.hook_pattern'"));
        }
        let all = HookPoint::all(n_layers);
        for p in &patterns {
            let single = HookFilter { patterns: vec![p.clone()] };
            if !all.iter().any(|h| single.matches(h)) {
                return Err(Error::input(format!(
                    "unknown hook name or pattern '{p}': it selects no hook of this {n_layers}-layer model (valid: hook_embed, blocks.{{0..{}}}.<{}>, ln_final.hook_normalized)",
                    n_layers.saturating_sub(1),
                    LAYER_HOOKS.join("|")
                )));
            }
        }
        Ok(HookFilter { patterns })
    }

    pub fn matches(&self, hook: &HookPoint) -> bool {
        let name = hook.to_string();
        self.patterns.iter().any(|p| glob_match(p, &name) || (!p.starts_with("blocks.") && !p.contains('*') && name.ends_with(&format!(".{p}"))))
    }
}

/// Minimal glob: `*` matches any (possibly empty) run of characters.
fn glob_match(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else { return false };
            (0..=rest.len()).filter(|&i| rest.is_char_boundary(i)).any(|i| glob_match(tail, &rest[i..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for h in HookPoint::all(3) {
            let name = h.to_string();
            assert_eq!(name.parse::<HookPoint>().unwrap(), h, "{name}");
        }
        assert_eq!(HookPoint::Pattern(12).to_string(), "blocks.12.attn.hook_pattern");
        assert_eq!(HookPoint::MlpPost(0).to_string(), "blocks.0.mlp.hook_post");
        assert_eq!(HookPoint::all(2).len(), 2 + 2 * 15);
        assert_eq!(HookPoint::Z(3).to_string(), "blocks.3.attn.hook_z");
        assert_eq!(HookPoint::AttnIn(0).to_string(), "blocks.0.ln1.hook_normalized");
    }

    #[test]
    fn bad_names_are_errors() {
        for bad in ["", "blocks.x.hook_resid_pre", "blocks.1.hook_nope", "resid", "blocks.1"] {
            assert!(bad.parse::<HookPoint>().is_err(), "{bad}");
        }
    }

    #[test]
    fn filters_glob_and_suffix() {
        let f = HookFilter::parse("blocks.*.attn.hook_pattern", 4).unwrap();
        assert!(f.matches(&HookPoint::Pattern(3)));
        assert!(!f.matches(&HookPoint::AttnScores(3)));
        let f = HookFilter::parse("hook_resid_post, hook_embed", 4).unwrap();
        assert!(f.matches(&HookPoint::ResidPost(0)) && f.matches(&HookPoint::Embed));
        assert!(!f.matches(&HookPoint::ResidPre(0)));
        let f = HookFilter::parse("blocks.1.*", 4).unwrap();
        assert!(f.matches(&HookPoint::V(1)) && !f.matches(&HookPoint::V(2)));
        assert!(HookFilter::parse("blocks.9.attn.hook_pattern", 4).is_err());
        assert!(HookFilter::parse("hook_nonsense", 4).is_err());
        assert!(HookFilter::parse(" , ", 4).is_err());
    }
}
