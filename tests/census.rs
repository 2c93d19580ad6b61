//! The census across designs (issue 46) against an independent HF transformers computation
//! (tests/fixtures/make_census_reference.py → census_reference.json): stories260K and SmolLM2 on
//! the first 160 tokens of texts/pride.txt analyzed as one probe — α_0 per head within 1e-4, the
//! sink rate at ε 0.2 / 0.3 / 0.8 (exact, away from ties), the first-token mass, the largest
//! activation, its layer and the kurtosis of that layer output, the share of attention weights
//! below 1e-30 — and the positions column on SmolLM3's NoPE layers.

#[macro_use]
mod common;

use sinkscope::analysis::census::Census;
use sinkscope::analysis::AnalysisReport;

fn census_of(tag: &str, model: &str, text: &str, tokens: usize) -> (AnalysisReport, Census) {
    let dir = common::temp_dir(&format!("census-{tag}"));
    let out = dir.join("run");
    let args = ["analyze", "-m", model, "-f", text, "--max-tokens", &tokens.to_string(), "--no-ablation", "-o", out.to_str().unwrap()];
    let done = common::sinkscope(&args);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let report: AnalysisReport = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let census = Census::of(&report);
    // report.md carries the same row.
    let md = common::sinkscope(&["export", out.to_str().unwrap()]);
    assert!(md.status.success(), "{}", String::from_utf8_lossy(&md.stderr));
    let index = std::fs::read_to_string(out.join("index.md")).unwrap();
    assert!(index.contains("### Census") && index.contains(&format!("{:.3}", census.first_token_mass)), "{index}");
    (report, census)
}

fn close(a: f64, b: f64, rel: f64, what: &str) {
    assert!(a.is_finite() && b.is_finite() && (a - b).abs() <= rel * b.abs().max(1e-12), "{what}: {a} vs {b}");
}

#[test]
fn the_census_matches_hf_transformers() {
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::fixture("census_reference.json")).unwrap()).unwrap();
    let text = common::fixture("texts/pride.txt");
    for (key, file) in [("stories260k", "stories260K.gguf"), ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")] {
        let path = model_or_skip!(file);
        let want = &json["models"][key];
        let ids: Vec<u64> = want["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        let (report, c) = census_of(key, path.to_str().unwrap(), text.to_str().unwrap(), ids.len());
        let probe = &report.probes[0];
        assert_eq!(probe.tokens.iter().map(|t| t.id as u64).collect::<Vec<_>>(), ids, "{key}: the same tokens");
        let alpha0: Vec<f64> = probe.alpha.iter().flatten().map(|h| h[0]).collect();
        let want0: Vec<f64> =
            want["alpha0"].as_array().unwrap().iter().flat_map(|l| l.as_array().unwrap().iter().map(|v| v.as_f64().unwrap())).collect();
        let worst = common::max_abs_diff("alpha0", &alpha0, &want0);
        assert!(worst < 1e-4, "{key}: α_0 {worst}");
        for rate in &c.sink_rate {
            // A head within 1e-4 of ε may fall either side; none does on these inputs.
            assert!(want0.iter().all(|a| (a - rate.epsilon).abs() > 1e-4), "{key}: a tie at ε {}", rate.epsilon);
            let reference = want["sink_rate"][rate.epsilon.to_string()].as_f64().unwrap();
            assert!((rate.percent - reference).abs() < 1e-9, "{key}: Sink_0^{} {} vs {reference}", rate.epsilon, rate.percent);
        }
        close(c.first_token_mass, want["first_token_mass"].as_f64().unwrap(), 1e-4, "first-token mass");
        close(c.largest_activation, want["largest_activation"].as_f64().unwrap(), 1e-4, "largest activation");
        assert_eq!(c.largest_layer as u64, want["largest_layer"].as_u64().unwrap(), "{key}: its layer");
        close(c.kurtosis.unwrap(), want["kurtosis"].as_f64().unwrap(), 1e-3, "kurtosis");
        let zeros = c.zero_share.unwrap();
        assert!((zeros - want["zero_share"].as_f64().unwrap()).abs() < 1e-4, "{key}: weights ≈ 0 {zeros}");
        assert_eq!((c.probes, c.learned_sink_mass, c.nope_layers), (1, None, 0));
        eprintln!("{key}: {c:?}");
    }
}

#[test]
fn the_census_reads_each_design_s_positions_windows_and_learned_sinks() {
    let text = common::fixture("texts/pride.txt");
    for arch in ["smollm3", "gpt_oss", "gpt2"] {
        let dir = common::fixture(&format!("arch/{arch}"));
        let (report, c) = census_of(arch, dir.to_str().unwrap(), text.to_str().unwrap(), 40);
        let cfg = &report.model.config;
        let nope = cfg.layers.iter().filter(|l| l.nope).count();
        match arch {
            "smollm3" => assert!(nope > 0 && c.positions() == format!("{} RoPE + {nope} NoPE", cfg.n_layers - nope)),
            "gpt2" => assert!(c.learned_positions && c.rope_layers == 0 && c.positions() == "learned absolute"),
            _ => assert_eq!(c.positions(), format!("{} RoPE", cfg.n_layers)),
        }
        assert_eq!(c.windowed_layers, cfg.windowed_layers().len());
        // gpt-oss: the mean learned-sink mass over (layer, head), as its probe measured it.
        let mass: Vec<f64> = report.probes[0].sink_mass.iter().flatten().copied().collect();
        match arch {
            "gpt_oss" => {
                assert!(c.windowed_layers > 0 && !mass.is_empty());
                close(c.learned_sink_mass.unwrap(), mass.iter().sum::<f64>() / mass.len() as f64, 1e-12, "learned-sink mass");
            }
            _ => assert_eq!(c.learned_sink_mass, None),
        }
    }
}
