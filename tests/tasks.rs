//! RULER-style tasks under presses (issue 45): the prompts say what each task says (lengths,
//! candidates of one shape, evidence that states the truth, cwe's frequencies), the task sweep
//! scores each arm as `press` scores the same tokens (the truth's NLL token by token, the evidence
//! kept from the same kept sets), and the command writes its run, refused when edited.

#[macro_use]
mod common;
mod rounding;

use sinkscope::kv::press::scores::PressKind;
use sinkscope::kv::press::select::{Budget, ADAPTIVE_ALPHA};
use sinkscope::kv::press::tasks::{run_arms, uncompressed, TaskArm};
use sinkscope::kv::press::{answer_uncompressed, run_press, Press, PressTokens};
use sinkscope::kv::retrieval::tasks::{task_prompts, Task, TaskPrompt, TaskSpec};
use sinkscope::model::tokenizer::Tokenizer;

fn book() -> String {
    std::fs::read_to_string(common::corpora_dir().join("pg1342_pride_and_prejudice.txt")).unwrap()
}

fn prompts(tok: &Tokenizer, task: Task, length: usize, seed: u64) -> Vec<TaskPrompt> {
    task_prompts(tok, &book(), task, TaskSpec { length, trials: 3, distractors: 9, seed }).unwrap()
}

fn decode_span(tok: &Tokenizer, p: &TaskPrompt, (a, b): (usize, usize)) -> String {
    tok.decode(&p.context[a..b])
}

#[test]
fn each_task_prompt_says_what_its_task_says() {
    let Some(lm) = rounding::smollm2() else { return };
    let tok = &lm.tokenizer;
    for task in Task::ALL {
        let ps = prompts(tok, task, 400, 7);
        assert_eq!(ps.len(), 3);
        assert_eq!(ps, prompts(tok, task, 400, 7), "{task:?}: one seed, one set of prompts");
        assert_ne!(ps, prompts(tok, task, 400, 8), "{task:?}: another seed, other prompts");
        assert_ne!(ps[0].candidates[0], ps[1].candidates[0], "{task:?}: trials differ");
        for p in &ps {
            let len = p.context.len() + p.question.len();
            match task {
                Task::Cwe => assert!(len <= 400 && len > 390, "{task:?}: {len} tokens"),
                _ => assert_eq!(len, 400, "{task:?}"),
            }
            assert_eq!(p.candidates.len(), 10);
            match task {
                // cwe's answers are joined from the words' single tokens.
                Task::Cwe => assert_eq!(tok.decode(&p.candidates[0]).trim(), p.truth.trim()),
                _ => assert_eq!(p.candidates[0], tok.encode_plain(&p.truth).unwrap()),
            }
            assert!(p.candidates.iter().all(|c| c.len() == p.candidates[0].len()), "{task:?}: candidates of one length");
            for (i, c) in p.candidates.iter().enumerate() {
                assert!(p.candidates[i + 1..].iter().all(|d| d != c), "{task:?}: candidates distinct");
            }
            let evidence: Vec<String> = p.evidence.iter().map(|&s| decode_span(tok, p, s)).collect();
            let truth = p.truth.trim();
            match task {
                Task::Passkey | Task::Multikey => {
                    assert_eq!(evidence.len(), 1);
                    assert!(evidence[0].contains(truth), "{evidence:?} states {truth}");
                    // The wrong keys of multikey are first the other needles' keys, in the context.
                    let text = tok.decode(&p.context);
                    let in_context = p.candidates[1..].iter().filter(|c| text.contains(tok.decode(c).trim())).count();
                    assert_eq!(in_context, if task == Task::Multikey { 3 } else { 0 }, "{task:?}");
                }
                Task::Multivalue => {
                    assert_eq!(evidence.len(), 4);
                    // Each value in the order the needles appear.
                    let values: Vec<String> = evidence.iter().map(|e| e.trim_end_matches('.').rsplit(' ').next().unwrap().to_string()).collect();
                    assert_eq!(truth, format!("{}, {}, {} and {}", values[0], values[1], values[2], values[3]));
                }
                Task::Vartrack => {
                    assert_eq!(evidence.len(), 5);
                    assert!(evidence[0].ends_with(&format!("= {truth}.")), "{evidence:?}");
                    // Each assignment names the variable the one before it set, and the question the last.
                    let var = |e: &str| e.split_whitespace().nth(1).unwrap().to_string();
                    for w in evidence.windows(2) {
                        assert!(w[1].trim_end_matches('.').ends_with(&format!("VAR {}", var(&w[0]))), "{w:?}");
                    }
                    assert!(tok.decode(&p.question).contains(&format!("VAR {}?", var(&evidence[4]))));
                }
                Task::Cwe => {
                    // " w1, w2 and w3": the words are tokens 0, 2 and 4 of every candidate.
                    let count = |id: u32| p.context.iter().filter(|&&t| t == id).count();
                    let top: Vec<u32> = [0, 2, 4].iter().map(|&i| p.candidates[0][i]).collect();
                    let counts: Vec<usize> = top.iter().map(|&w| count(w)).collect();
                    assert_eq!(counts.iter().sum::<usize>(), p.evidence.len());
                    assert!(p.evidence.iter().all(|&(a, b)| b == a + 1 && top.contains(&p.context[a])));
                    let others: Vec<u32> = p.candidates[1..].iter().flat_map(|c| [c[0], c[2], c[4]]).filter(|w| !top.contains(w)).collect();
                    let most_other = others.iter().map(|&w| count(w)).max().unwrap();
                    assert!(counts[0] > counts[1] && counts[1] > counts[2] && counts[2] > most_other && most_other > 0, "{counts:?} vs {most_other}");
                }
            }
        }
    }
}

/// Arms sharing prefills score the truth as `run_press` scores the same tokens, one press at a
/// time (per token within 1e-4 nats), and the uncompressed prompt as `answer_uncompressed`; a
/// ratio of 0 keeps everything and scores as uncompressed.
#[test]
fn arms_score_the_truth_as_press_does() {
    let Some(lm) = rounding::smollm2() else { return };
    let m = &lm.model;
    let sinks4 = |p: Press| Press { sinks: 4, ..p };
    let arms = [
        TaskArm { press: Press::new(PressKind::Snapkv, 0.5), query_aware: false },
        TaskArm { press: Press::new(PressKind::Knorm, 0.5), query_aware: true },
        TaskArm { press: sinks4(Press::new(PressKind::Knorm, 0.75)), query_aware: false },
        TaskArm { press: Press { block: Some(16), ..Press::new(PressKind::ExpectedAttention, 0.75) }, query_aware: false },
        TaskArm { press: Press { budget: Budget::Adaptive { alpha: ADAPTIVE_ALPHA }, ..Press::new(PressKind::Tova, 0.25) }, query_aware: true },
        TaskArm { press: Press::new(PressKind::StreamingLlm, 0.5), query_aware: false },
        TaskArm { press: Press::new(PressKind::ObservedAttention, 0.0), query_aware: false },
    ];
    for task in [Task::Passkey, Task::Multivalue] {
        let p = &prompts(&lm.tokenizer, task, 300, 1)[0];
        let base = uncompressed(m, p).unwrap();
        let tokens = |query_aware| PressTokens { context: &p.context, question: &p.question, answer: &p.candidates[0], query_aware };
        let want = answer_uncompressed(m, tokens(false)).unwrap();
        common::assert_close("uncompressed truth", &base.truth_tokens, &want.answer_nll, 1e-4);
        let got = run_arms(m, p, &arms, &mut |_| {}).unwrap();
        assert_eq!(got.len(), arms.len());
        for (arm, o) in arms.iter().zip(&got) {
            let one = run_press(m, arm.press, tokens(arm.query_aware)).unwrap();
            common::assert_close(&format!("{task:?} {}", arm.label()), &o.scores.truth_tokens, &one.answer_nll, 1e-4);
            assert!((o.scores.nll[0] - one.answer_nll.iter().sum::<f64>()).abs() < 1e-3);
            let positions: Vec<usize> = p.evidence.iter().flat_map(|&(a, b)| a..b).collect();
            let heads: Vec<&Vec<usize>> = one.kept.iter().flatten().collect();
            let held: usize = heads.iter().map(|h| positions.iter().filter(|q| h.contains(q)).count()).sum();
            assert!((o.evidence_kept - held as f64 / (positions.len() * heads.len()) as f64).abs() < 1e-12, "{}", arm.label());
        }
        let all = got.last().unwrap();
        assert_eq!(all.evidence_kept, 1.0);
        assert_eq!(all.scores.rank(), base.rank());
        common::assert_close("ratio 0 against uncompressed", &all.scores.nll, &base.nll, 1e-4);
    }
}

#[test]
fn tasks_command_writes_its_run() {
    let _ = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let dir = common::temp_dir("tasks-run");
    let book = common::corpora_dir().join("pg1342_pride_and_prejudice.txt");
    let out = dir.join("run");
    let out_s = out.to_str().unwrap();
    let args = [
        "tasks",
        "-m",
        "smollm2-135m",
        "-f",
        book.to_str().unwrap(),
        "--task",
        "passkey,cwe",
        "--length",
        "300",
        "--trials",
        "1",
        "--press",
        "snapkv,streaming_llm",
        "--ratio",
        "0.5",
        "--sinks",
        "4",
        "--block",
        "16",
        "--query-aware",
        "-o",
        out_s,
    ];
    let done = common::sinkscope(&args);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(stdout.contains("passkey") && stdout.contains("snapkv+block16+sinks4+aware"), "{stdout}");
    let got: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("tasks.json")).unwrap()).unwrap();
    let labels: Vec<&str> = got["arms"].as_array().unwrap().iter().map(|a| a["label"].as_str().unwrap()).collect();
    // snapkv: own sinks (0) and 4, token and block, agnostic and aware: 8; streaming_llm's own
    // sinks are 4: 4; and "none".
    assert_eq!(labels.len(), 13, "{labels:?}");
    assert_eq!(labels[0], "none");
    assert!(labels.contains(&"streaming_llm+block16+aware") && !labels.contains(&"streaming_llm+sinks4"), "{labels:?}");
    assert_eq!(got["prompts"].as_array().unwrap().len(), 2);
    assert_eq!(got["outcomes"].as_array().unwrap().len(), 13 * 2);
    let rows = sinkscope::report::parquet::read_frame(&out.join("tables/task_trials.parquet")).unwrap().height();
    assert_eq!(rows, 13 * 2);
    let md = std::fs::read_to_string(out.join("tasks.md")).unwrap();
    assert!(md.contains("| none | - |") && md.contains("cwe first/exact"), "{md}");
    // An edited record is refused on reading back, by name.
    let mut edited = got.clone();
    edited["outcomes"][5]["rank"] = serde_json::json!(0);
    std::fs::write(out.join("tasks.json"), edited.to_string()).unwrap();
    let export = common::sinkscope(&["export", out_s, "--parquet"]);
    let err = String::from_utf8_lossy(&export.stderr);
    assert_eq!(export.status.code(), Some(2), "{err}");
    assert!(err.contains("tasks.json") && err.contains("outcomes[5]"), "{err}");
}
