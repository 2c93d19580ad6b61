//! Pass-key retrieval under a cache policy (`kv::retrieval`): the answer's teacher-forced NLL
//! equals a plain forward over the same tokens under dense, the banded-mask forward under window,
//! the simulator's stream under sink, keep, recompute and the score-based rules (decoded token by
//! token); prompts that share a prefix give what separate runs give; greedy exact match and rank
//! follow from the scores.

mod common;

use sinkscope::kv::retrieval::arms::sweep;
use sinkscope::kv::retrieval::haystack::{draw_trials, Haystack, REPEATED_FILLER};
use sinkscope::kv::retrieval::Compression;
use sinkscope::kv::{simulate_with, Eviction, Policy, PolicyKind, PositionMode, SimOptions};
use sinkscope::model::cache_rounding::CacheRounding;
use sinkscope::model::receiver::NoCapture;
use sinkscope::model::{load, LoadOptions, LoadedModel};

/// nats; every path here is f32 arithmetic over the same weights in a different order.
const NLL_TOL: f64 = 1e-4;

fn load_model(file: &str) -> Option<LoadedModel> {
    let path = common::model(file)?;
    Some(load(path.to_str().unwrap(), &LoadOptions::default()).unwrap())
}

fn policy(kind: PolicyKind, pinned: usize, cache: usize) -> Policy {
    Policy::new(Eviction::of_kind(kind, pinned, None), cache, PositionMode::Slot)
}

/// The answer's per-token NLL from `nll_of_stream` (step t scores token t + 1) over prompt + answer.
fn answer_steps(stream_nll: &[f64], prompt_len: usize, m: usize) -> Vec<f64> {
    stream_nll[prompt_len - 1..prompt_len - 1 + m].to_vec()
}

struct Case {
    haystack: Haystack,
    trials: Vec<sinkscope::kv::retrieval::haystack::Trial>,
    insertions: Vec<usize>,
}

/// Prompts of `length` tokens in `filler` (the repeated sentences, or a book: a book has no exact
/// repeats, whose near-equal attention can flip a score-based rule's choice on float rounding).
fn case(lm: &LoadedModel, length: usize, filler: &str) -> Case {
    case_at(lm, length, filler, &[0.8, 0.0, 0.5, 1.0])
}

/// [`case`] with the needle at `depths`.
fn case_at(lm: &LoadedModel, length: usize, filler: &str, depths: &[f64]) -> Case {
    let trials = draw_trials(&lm.tokenizer, 2, 3, 7).unwrap();
    let haystack = Haystack::new(&lm.tokenizer, filler, length, trials[0].needle.len()).unwrap();
    let insertions = depths.iter().map(|&d| haystack.insertion(d)).collect();
    Case { haystack, trials, insertions }
}

#[test]
fn under_dense_the_answer_nll_is_a_plain_forward_and_window_the_banded_forward() {
    for file in ["stories260K.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"] {
        let Some(mut lm) = load_model(file) else { return };
        let c = case(&lm, 300, REPEATED_FILLER);
        let dense = sweep(
            &lm.model,
            (policy(PolicyKind::Dense, 0, 0), Compression::Streamed, CacheRounding::default()),
            &c.haystack,
            &c.insertions,
            &c.trials,
            &mut |_| {},
        )
        .unwrap();
        let w = 64;
        let window = sweep(
            &lm.model,
            (policy(PolicyKind::Window, 0, w), Compression::Streamed, CacheRounding::default()),
            &c.haystack,
            &c.insertions,
            &c.trials,
            &mut |_| {},
        )
        .unwrap();
        let plain = |lm: &LoadedModel, ids: &[u32], p: usize, answer: &[u32]| -> Vec<f64> {
            let h = lm.model.forward(ids, None, &mut NoCapture).unwrap();
            lm.model.next_token_nll(&h.narrow(0, p - 1, answer.len()).unwrap(), answer).unwrap()
        };
        let mut want_dense = Vec::new();
        for (i, &at) in c.insertions.iter().enumerate() {
            for (t, trial) in c.trials.iter().enumerate() {
                let prompt = c.haystack.prompt(at, &trial.needle);
                assert_eq!(dense[i][t].prompt_len, prompt.len());
                for (k, cand) in trial.candidates.iter().enumerate() {
                    let ids = [&prompt[..], cand].concat();
                    let want = plain(&lm, &ids, prompt.len(), cand);
                    want_dense.push((i, t, k, want.clone()));
                    let got = dense[i][t].scores.nll[k];
                    assert!((got - want.iter().sum::<f64>()).abs() < NLL_TOL, "{file} dense depth {i} trial {t} candidate {k}: {got} vs {want:?}");
                    if k == 0 {
                        common::assert_close("dense truth tokens", &dense[i][t].scores.truth_tokens, &want, NLL_TOL);
                    }
                }
                assert_eq!(dense[i][t].needle_kept, 1.0);
            }
        }
        // The banded-mask forward: every layer sees at most its last W keys.
        for l in lm.model.cfg.layers.iter_mut() {
            l.window = Some(l.window.map_or(w, |own| own.min(w)));
        }
        let mut differs = 0;
        for (i, &at) in c.insertions.iter().enumerate() {
            for (t, trial) in c.trials.iter().enumerate() {
                let prompt = c.haystack.prompt(at, &trial.needle);
                for (k, cand) in trial.candidates.iter().enumerate() {
                    let want = plain(&lm, &[&prompt[..], cand].concat(), prompt.len(), cand);
                    let got = window[i][t].scores.nll[k];
                    assert!((got - want.iter().sum::<f64>()).abs() < NLL_TOL, "{file} window depth {i} trial {t} candidate {k}: {got} vs {want:?}");
                    let dense_sum: f64 = want_dense.iter().find(|d| (d.0, d.1, d.2) == (i, t, k)).unwrap().3.iter().sum();
                    differs += ((got - dense_sum).abs() > 1e-3) as usize;
                }
                // After the prompt the window holds its last W − 1 tokens (the answer's first
                // query makes W).
                let distance = prompt.len() - window[i][t].needle_start;
                let kept = window[i][t].needle_kept;
                if distance < w {
                    assert_eq!(kept, 1.0, "{file}: a needle {distance} tokens back is inside a window of {w}");
                } else if distance >= w - 1 + trial.needle.len() {
                    assert_eq!(kept, 0.0, "{file}: a needle {distance} tokens back is out of a window of {w}");
                }
            }
        }
        assert!(differs > 0, "{file}: the window changed no answer's NLL: the test would not see a dense run");
    }
}

#[test]
fn sink_keep_recompute_and_score_based_rules_match_the_simulator_and_shared_prefixes_change_nothing() {
    for file in ["stories260K.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"] {
        let Some(lm) = load_model(file) else { return };
        let book = std::fs::read_to_string(common::corpora_dir().join("pg84_frankenstein.txt")).unwrap();
        // The suite's slowest reference: by default 200-token prompts with the needle at two
        // depths (the score-based rules decoded token by token at depth 0.5); the long run
        // (`SINKSCOPE_LONG_TESTS=1`) 260 tokens at four.
        let (length, depths, decoded): (usize, &[f64], usize) =
            if common::long_tests() { (260, &[0.8, 0.0, 0.5, 1.0], 2) } else { (200, &[0.0, 0.5], 1) };
        let c = case_at(&lm, length, &book[..20_000], depths);
        for p in [
            policy(PolicyKind::Sink, 4, 96),
            policy(PolicyKind::Keep, 4, 96),
            policy(PolicyKind::H2o, 4, 96),
            policy(PolicyKind::Tova, 0, 96),
            policy(PolicyKind::Snapkv, 4, 96),
            policy(PolicyKind::Recompute, 0, 96),
        ] {
            let all =
                sweep(&lm.model, (p, Compression::Streamed, CacheRounding::default()), &c.haystack, &c.insertions, &c.trials, &mut |_| {}).unwrap();
            // The prompts one at a time (no shared prefix), and the truth through the simulator.
            for (i, &at) in c.insertions.iter().enumerate() {
                let alone =
                    sweep(&lm.model, (p, Compression::Streamed, CacheRounding::default()), &c.haystack, &[at], &c.trials[1..], &mut |_| {}).unwrap();
                common::assert_close(&format!("{file} {} shared vs alone", p.label()), &all[i][1].scores.nll, &alone[0][0].scores.nll, NLL_TOL);
                assert_eq!(all[i][1].needle_kept, alone[0][0].needle_kept);
                // Decoding token by token is slow: the score-based rules at one depth.
                if p.is_scored() && i != decoded {
                    continue;
                }
                let trial = &c.trials[0];
                let prompt = c.haystack.prompt(at, &trial.needle);
                let ids = [&prompt[..], &trial.candidates[0]].concat();
                let opts = SimOptions { token_by_token: p.is_scored(), ..SimOptions::default() };
                let sim = simulate_with(&lm.model, &ids, &[p], opts, &mut |_, _| {}).unwrap().remove(0);
                let want = answer_steps(&sim.nll, prompt.len(), trial.candidates[0].len());
                common::assert_close(&format!("{file} {} depth {i} vs the simulator", p.label()), &all[i][0].scores.truth_tokens, &want, NLL_TOL);
            }
        }
    }
}

#[test]
fn rank_and_greedy_match_follow_from_the_scores() {
    let Some(lm) = load_model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let c = case(&lm, 400, REPEATED_FILLER);
    let dense = sweep(
        &lm.model,
        (policy(PolicyKind::Dense, 0, 0), Compression::Streamed, CacheRounding::default()),
        &c.haystack,
        &c.insertions,
        &c.trials,
        &mut |_| {},
    )
    .unwrap();
    for (o, trial) in dense.iter().flat_map(|row| row.iter().zip(&c.trials)) {
        let s = &o.scores;
        let better = s.nll[1..].iter().filter(|&&d| d <= s.nll[0]).count();
        assert_eq!(s.rank(), better + 1);
        // Greedy reproduces the key exactly only if each of its tokens was the most likely one,
        // which makes the truth the likeliest sequence token by token.
        match s.first_wrong {
            None => assert!(s.truth_tokens.iter().all(|&n| n.is_finite()) && s.predicted.is_none()),
            Some(j) => assert!(j < s.truth_tokens.len() && s.predicted.is_some_and(|p| p != trial.candidates[0][j])),
        }
    }
    // SmolLM2 retrieves a key from 400 tokens of filler with the whole cache: the truth ranks
    // first and greedy decoding reproduces it in most prompts.
    let exact = dense.iter().flatten().filter(|o| o.scores.first_wrong.is_none()).count();
    let first = dense.iter().flatten().filter(|o| o.scores.rank() == 1).count();
    let n = dense.iter().flatten().count();
    eprintln!("SmolLM2 dense at 400 tokens: exact {exact}/{n}, ranked first {first}/{n}");
    assert!(first * 4 >= n * 3, "SmolLM2 ranks the key first in only {first} of {n} prompts");
}

#[test]
fn the_command_writes_a_resumable_sweep_and_refuses_bad_input() {
    let Some(model) = common::model("stories260K.gguf") else { return };
    let model = model.to_str().unwrap().to_string();
    let out = common::temp_dir("needle-cli");
    let dir = out.join("run");
    let dir_s = dir.to_str().unwrap();
    let args = [
        "needle",
        "-m",
        &model,
        "--lengths",
        "200,400",
        "--depths",
        "0,0.5,1",
        "--trials",
        "2",
        "--policy",
        "dense,window,sink,tova",
        "--cache",
        "64",
        "--question-known",
        "-o",
        dir_s,
    ];
    let first = common::sinkscope(&args);
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{}{}", stdout, String::from_utf8_lossy(&first.stderr));
    assert!(
        stdout.contains("needle within W") && stdout.contains("tova S=0") && stdout.contains("tova S=4, W=64 (slot) · question known"),
        "{stdout}"
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("needle.json")).unwrap()).unwrap();
    // dense, window, sink, tova unpinned and with 4 pinned, each tova also with the question
    // known: 7 policies × 2 lengths × 3 depths.
    let cells = report["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 7 * 2 * 3);
    assert_eq!(report["trials"].as_array().unwrap().len(), 7 * 2 * 3 * 2);
    for c in cells {
        let (acc, lo, hi) = (c["rank_accuracy"].as_f64().unwrap(), c["rank_ci"][0].as_f64().unwrap(), c["rank_ci"][1].as_f64().unwrap());
        assert!(lo <= acc && acc <= hi && (0.0..=1.0).contains(&lo) && (0.0..=1.0).contains(&hi), "{c}");
        assert_eq!(c["length"].as_u64().unwrap() % 200, 0, "prompts are exactly the lengths asked for");
    }
    for f in [
        "needle.md",
        "tables/needle.parquet",
        "tables/needle_trials.parquet",
        "figures/needle-dense.png",
        "figures/needle-dense.svg",
        "figures/needle-distance.png",
    ] {
        assert!(std::fs::metadata(dir.join(f)).is_ok_and(|m| m.len() > 0), "{f} missing");
    }
    let frame = sinkscope::report::parquet::read_frame(&dir.join("tables/needle.parquet")).unwrap();
    assert_eq!(frame.height(), cells.len());
    // A second run reuses every part and finds the same numbers.
    let again = common::sinkscope(&args);
    assert!(again.status.success());
    let said = String::from_utf8_lossy(&again.stderr).to_string() + &String::from_utf8_lossy(&again.stdout);
    assert_eq!(said.matches("already done").count(), 14, "{said}");
    let second: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("needle.json")).unwrap()).unwrap();
    // Parts are read back to the last bit (serde_json's float_roundtrip).
    assert!(second["cells"] == report["cells"], "a resumed sweep changed its cells");
    // Bad input: one line naming the problem, exit 2, nothing written.
    let empty = out.join("empty.txt");
    std::fs::write(&empty, "  \n").unwrap();
    let bad_dir = out.join("bad");
    let bad_s = bad_dir.to_str().unwrap();
    for (extra, says) in [
        (vec!["--depths", "1.5"], "depth 1.5 is outside"),
        (vec!["--lengths", "40"], "leaves no room for filler"),
        (vec!["--filler", empty.to_str().unwrap()], "empty"),
        (vec!["--positions", "delta"], "slot or original"),
    ] {
        let mut a = vec!["needle", "-m", &model, "--trials", "1", "--lengths", "200", "--depths", "0", "-o", bad_s];
        a.extend(extra.iter().copied());
        let o = common::sinkscope(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(!bad_dir.join("needle.json").exists());
    }
}

#[test]
fn with_the_question_known_a_budget_that_holds_the_prompt_is_dense_and_the_question_is_always_kept() {
    for file in ["stories260K.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"] {
        let Some(lm) = load_model(file) else { return };
        let book = std::fs::read_to_string(common::corpora_dir().join("pg84_frankenstein.txt")).unwrap();
        let c = case(&lm, 260, &book[..20_000]);
        let dense = sweep(
            &lm.model,
            (policy(PolicyKind::Dense, 0, 0), Compression::Streamed, CacheRounding::default()),
            &c.haystack,
            &c.insertions,
            &c.trials,
            &mut |_| {},
        )
        .unwrap();
        for kind in [PolicyKind::H2o, PolicyKind::Tova, PolicyKind::Snapkv] {
            // W = 300 holds the 260-token prompt: compressing keeps every key.
            let whole = sweep(
                &lm.model,
                (policy(kind, 4, 300), Compression::QuestionKnown, CacheRounding::default()),
                &c.haystack,
                &c.insertions,
                &c.trials,
                &mut |_| {},
            )
            .unwrap();
            let small = sweep(
                &lm.model,
                (policy(kind, 4, 64), Compression::QuestionKnown, CacheRounding::default()),
                &c.haystack,
                &c.insertions,
                &c.trials,
                &mut |_| {},
            )
            .unwrap();
            for ((d, w), s) in dense.iter().flatten().zip(whole.iter().flatten()).zip(small.iter().flatten()) {
                common::assert_close(&format!("{file} {kind:?} question known, W = 300, vs dense"), &w.scores.nll, &d.scores.nll, NLL_TOL);
                assert_eq!(w.needle_kept, 1.0);
                assert!((0.0..=1.0).contains(&s.needle_kept));
                assert!(s.scores.nll.iter().all(|v| v.is_finite()));
            }
            let kept = |o: &Vec<Vec<sinkscope::kv::retrieval::TrialOutcome>>| {
                o.iter().flatten().map(|t| t.needle_kept).sum::<f64>() / o.iter().flatten().count() as f64
            };
            eprintln!("{file} {kind:?} W = 64, question known: needle kept {:.3}", kept(&small));
        }
        // The compressed cache differs from the streamed one: the streamed policy at W = 64 is
        // another run of the same prompts.
        let streamed = sweep(
            &lm.model,
            (policy(PolicyKind::Snapkv, 4, 64), Compression::Streamed, CacheRounding::default()),
            &c.haystack,
            &c.insertions,
            &c.trials,
            &mut |_| {},
        )
        .unwrap();
        let known = sweep(
            &lm.model,
            (policy(PolicyKind::Snapkv, 4, 64), Compression::QuestionKnown, CacheRounding::default()),
            &c.haystack,
            &c.insertions,
            &c.trials,
            &mut |_| {},
        )
        .unwrap();
        let differs = streamed.iter().flatten().zip(known.iter().flatten()).filter(|(a, b)| (a.scores.nll[0] - b.scores.nll[0]).abs() > 1e-3).count();
        assert!(differs > 0, "{file}: the question-known snapkv scored every prompt as the streamed one");
        assert!(sweep(
            &lm.model,
            (policy(PolicyKind::Sink, 4, 64), Compression::QuestionKnown, CacheRounding::default()),
            &c.haystack,
            &c.insertions,
            &c.trials,
            &mut |_| {}
        )
        .is_err());
    }
}

#[test]
fn gemma_s_own_sliding_windows_hold_under_the_stream_and_its_branches() {
    // Gemma 3's local layers see 512 keys: 700-token prompts make the windows bite on the
    // prompt's queries and on every candidate's.
    let Some(lm) = load_model("gemma-3-270m-q4_k_m.gguf") else { return };
    let trials = draw_trials(&lm.tokenizer, 1, 3, 11).unwrap();
    let book = std::fs::read_to_string(common::corpora_dir().join("pg84_frankenstein.txt")).unwrap();
    let haystack = Haystack::new(&lm.tokenizer, &book[..20_000], 700, trials[0].needle.len()).unwrap();
    let insertions = [haystack.insertion(0.0), haystack.insertion(0.9)];
    let dense = sweep(
        &lm.model,
        (policy(PolicyKind::Dense, 0, 0), Compression::Streamed, CacheRounding::default()),
        &haystack,
        &insertions,
        &trials,
        &mut |_| {},
    )
    .unwrap();
    let sink = sweep(
        &lm.model,
        (policy(PolicyKind::Sink, 4, 128), Compression::Streamed, CacheRounding::default()),
        &haystack,
        &insertions,
        &trials,
        &mut |_| {},
    )
    .unwrap();
    for (i, &at) in insertions.iter().enumerate() {
        let prompt = haystack.prompt(at, &trials[0].needle);
        for (k, cand) in trials[0].candidates.iter().enumerate() {
            let ids = [&prompt[..], cand].concat();
            let h = lm.model.forward(&ids, None, &mut NoCapture).unwrap();
            let want: f64 = lm.model.next_token_nll(&h.narrow(0, prompt.len() - 1, cand.len()).unwrap(), cand).unwrap().iter().sum();
            let got = dense[i][0].scores.nll[k];
            assert!((got - want).abs() < NLL_TOL, "gemma dense depth {i} candidate {k}: {got} vs {want}");
        }
        let ids = [&prompt[..], &trials[0].candidates[0]].concat();
        let sim = simulate_with(&lm.model, &ids, &[policy(PolicyKind::Sink, 4, 128)], SimOptions::default(), &mut |_, _| {}).unwrap().remove(0);
        let want = answer_steps(&sim.nll, prompt.len(), trials[0].candidates[0].len());
        common::assert_close(&format!("gemma sink depth {i} vs the simulator"), &sink[i][0].scores.truth_tokens, &want, NLL_TOL);
    }
    // window W = 128 against the forward whose every layer sees at most 128 keys.
    let window = sweep(
        &lm.model,
        (policy(PolicyKind::Window, 0, 128), Compression::Streamed, CacheRounding::default()),
        &haystack,
        &insertions,
        &trials,
        &mut |_| {},
    )
    .unwrap();
    let mut banded = lm;
    for l in banded.model.cfg.layers.iter_mut() {
        l.window = Some(l.window.map_or(128, |own| own.min(128)));
    }
    for (i, &at) in insertions.iter().enumerate() {
        let prompt = haystack.prompt(at, &trials[0].needle);
        let cand = &trials[0].candidates[0];
        let h = banded.model.forward(&[&prompt[..], cand].concat(), None, &mut NoCapture).unwrap();
        let want = banded.model.next_token_nll(&h.narrow(0, prompt.len() - 1, cand.len()).unwrap(), cand).unwrap();
        common::assert_close(&format!("gemma window depth {i} vs the banded forward"), &window[i][0].scores.truth_tokens, &want, NLL_TOL);
    }
}
