//! The config.json fields the decoder reads (after the family's rewrite) and the kind of value
//! each must hold: a present one outside its range is refused by name before any is used (a
//! `rope_theta` given as a string no longer runs with the default base); `null` counts as absent.

use serde_json::Value as Json;

use super::setting_rules::{Expect, Seen};

/// Each field as a JSON pointer into config.json, and its kind.
pub const HF_FIELDS: &[(&str, Expect)] = &[
    ("/hidden_size", Expect::Count),
    ("/num_attention_heads", Expect::Count),
    ("/num_hidden_layers", Expect::Count),
    ("/num_key_value_heads", Expect::Count),
    ("/head_dim", Expect::Count),
    ("/intermediate_size", Expect::Count),
    ("/vocab_size", Expect::Count),
    ("/max_position_embeddings", Expect::Count),
    ("/linear_num_key_heads", Expect::Count),
    ("/linear_num_value_heads", Expect::Count),
    ("/linear_key_head_dim", Expect::Count),
    ("/linear_value_head_dim", Expect::Count),
    ("/linear_conv_kernel_dim", Expect::Count),
    ("/sliding_window", Expect::Size),
    ("/rope_theta", Expect::Positive),
    ("/rope_parameters/rope_theta", Expect::Positive),
    ("/rope_parameters/full_attention/rope_theta", Expect::Positive),
    ("/rotary_emb_base", Expect::Positive),
    ("/rope_local_base_freq", Expect::Positive),
    ("/partial_rotary_factor", Expect::Fraction),
    ("/rope_parameters/partial_rotary_factor", Expect::Fraction),
    ("/rotary_pct", Expect::Fraction),
    ("/rms_norm_eps", Expect::NonNegative),
    ("/layer_norm_eps", Expect::NonNegative),
    ("/layer_norm_epsilon", Expect::NonNegative),
    ("/use_parallel_residual", Expect::Flag),
    ("/tie_word_embeddings", Expect::Flag),
    ("/query_pre_attn_scalar", Expect::Positive),
    ("/attn_logit_softcapping", Expect::Positive),
    ("/final_logit_softcapping", Expect::Positive),
    ("/num_local_experts", Expect::Count),
    ("/num_experts", Expect::Size),
    ("/num_experts_per_tok", Expect::Count),
    ("/moe_intermediate_size", Expect::Count),
    ("/shared_expert_intermediate_size", Expect::Size),
    ("/norm_topk_prob", Expect::Flag),
    ("/swiglu_alpha", Expect::Finite),
    ("/swiglu_limit", Expect::Positive),
];

/// A config.json value as the setting rules see it (`None`: null, as if absent).
fn seen(v: &Json) -> Option<Seen> {
    Some(match v {
        Json::Null => return None,
        Json::Bool(b) => Seen::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Seen::Int(i128::from(i)),
            (_, Some(u)) => Seen::Int(i128::from(u)),
            _ => Seen::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Seen::Other(format!("the string {s:?}")),
        Json::Array(a) => Seen::Other(format!("a list of {} values", a.len())),
        Json::Object(_) => Seen::Other("an object".into()),
    })
}

/// The first field of [`HF_FIELDS`] whose value is not of its kind, in words ("rope_theta = the
/// string \"1e6\" is not a finite number above 0").
pub fn check_fields(json: &Json) -> Result<(), String> {
    for &(pointer, expect) in HF_FIELDS {
        if let Some(seen) = json.pointer(pointer).and_then(seen) {
            expect.check(&pointer[1..].replace('/', "."), &seen)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row refuses a value of another kind by the field's name, and admits one of its own.
    #[test]
    fn every_field_is_checked_by_name() {
        for &(pointer, expect) in HF_FIELDS {
            let set = |value: Json| {
                let mut json = serde_json::json!({});
                let mut at = &mut json;
                let parts: Vec<&str> = pointer[1..].split('/').collect();
                for part in &parts[..parts.len() - 1] {
                    at = at.as_object_mut().unwrap().entry(part.to_string()).or_insert(serde_json::json!({}));
                }
                at.as_object_mut().unwrap().insert(parts[parts.len() - 1].to_string(), value);
                json
            };
            let name = pointer[1..].replace('/', ".");
            let err = check_fields(&set(Json::from("1e6"))).unwrap_err();
            assert!(err.starts_with(&format!("{name} = the string \"1e6\" is not")), "{err}");
            let good = if expect == Expect::Flag { Json::Bool(true) } else { Json::from(1) };
            assert_eq!(check_fields(&set(good)), Ok(()), "{name}");
            assert_eq!(check_fields(&set(Json::Null)), Ok(()), "{name}: null is absent");
        }
        let inf_like = serde_json::json!({"rms_norm_eps": -1e-6});
        assert!(check_fields(&inf_like).unwrap_err().contains("rms_norm_eps = -0.000001 is not a finite number, 0 or more"));
    }
}
