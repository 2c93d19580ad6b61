//! Reading per-token logprob traces from serving logs: JSONL records, OpenAI-compatible completion
//! and chat responses (as vLLM and llama.cpp's server return them, whole or streamed as `data:`
//! chunks), llama.cpp's native `completion_probabilities`, sinkscope's own `stream.json`, and CSV
//! with a `logprob` column — several requests per file — into one shape, or one clear error naming
//! the file and the record.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

/// One request's tokens, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceRequest {
    pub id: String,
    /// Natural-log probability of each generated (or scored) token.
    pub logprobs: Vec<f64>,
    /// The token's text where the trace gives it.
    pub tokens: Vec<Option<String>>,
    /// Each scored token's id, where the trace gives it (`verify` needs them).
    pub token_ids: Vec<Option<u32>>,
    /// Unscored token ids before the first scored one (a prompt logged with null logprobs).
    pub prompt_ids: Vec<u32>,
    /// Every generated token's id in order, where the trace lists them apart from the scored
    /// ones (llama.cpp's `tokens` with `return_tokens`): its server gives no probability to a token
    /// that ends inside a UTF-8 character, so the scored tokens can be a subsequence of these.
    pub generated_ids: Vec<u32>,
    /// The KV cache's length after each token, where the trace gives it.
    pub cache_len: Vec<Option<usize>>,
    /// Token indices at which the trace reports an eviction (explicit events, or the cache
    /// length failing to grow).
    pub evictions: Vec<usize>,
}

/// Which format a trace was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    Jsonl,
    OpenAi,
    LlamaCpp,
    SinkscopeStream,
    Csv,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub format: TraceFormat,
    pub requests: Vec<TraceRequest>,
}

/// Reads a trace file, telling the format from its content.
pub fn read_trace(path: &Path) -> Result<Trace> {
    let bytes = super::regular::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::file(path, "no such file"),
        _ => Error::file(path, format!("cannot read ({e})")),
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::file(path, format!("is not UTF-8 text (bad byte at offset {}); a trace is JSON, JSONL or CSV", e.utf8_error().valid_up_to()))
    })?;
    parse_trace(&text).map_err(|why| Error::file(path, why))
}

/// Parses a trace's text; the error says what is wrong and where.
pub fn parse_trace(text: &str) -> std::result::Result<Trace, String> {
    let trimmed = text.trim_start_matches('\u{feff}').trim();
    if trimmed.is_empty() {
        return Err("is empty; a trace needs one logprob per token".into());
    }
    let trace = if trimmed.starts_with("data:") {
        from_jsonl(trimmed)?
    } else if trimmed.starts_with('{') || trimmed.starts_with('[') {
        match serde_json::from_str::<Value>(trimmed) {
            Ok(v) => from_json_document(&v)?,
            // Not one JSON document: one per line.
            Err(_) if trimmed.starts_with('{') => from_jsonl(trimmed)?,
            Err(e) => return Err(format!("is not valid JSON ({e})")),
        }
    } else {
        from_csv(trimmed)?
    };
    if trace.requests.iter().all(|r| r.logprobs.is_empty()) {
        return Err("holds no token logprobs (OpenAI responses need `logprobs` requested; CSV needs a `logprob` column)".into());
    }
    for r in &trace.requests {
        if let Some(i) = r.logprobs.iter().position(|l| !l.is_finite() || *l > 1e-6) {
            return Err(format!("request {}: token {i} has logprob {} — a log-probability is a finite number ≤ 0", r.id, r.logprobs[i]));
        }
        if let Some(i) = r.logprobs.iter().position(|&l| l < MIN_LOGPROB) {
            return Err(format!(
                "request {}: token {i} has logprob {:?} — below {MIN_LOGPROB} nats, which no softmax over finite f32 or f64 logits reaches: a placeholder (some APIs write −9999 for a token they did not score) or a corrupt trace; drop those tokens",
                r.id,
                r.logprobs[i]
            ));
        }
    }
    Ok(trace)
}

fn from_json_document(v: &Value) -> std::result::Result<Trace, String> {
    match v {
        Value::Array(items) => {
            let mut requests = Vec::new();
            let mut format = None;
            for (i, item) in items.iter().enumerate() {
                let t = response(item, &format!("#{i}")).map_err(|e| format!("element {i}: {e}"))?;
                format.get_or_insert(t.format);
                requests.extend(t.requests);
            }
            Ok(Trace { format: format.ok_or("is an empty JSON array")?, requests })
        }
        Value::Object(o) if o.contains_key("outcomes") && o.contains_key("sinkscope_version") => sinkscope_stream(v),
        Value::Object(o) if o.contains_key("logprob") => from_jsonl(&v.to_string()),
        _ => response(v, ""),
    }
}

/// One OpenAI-compatible or llama.cpp response.
fn response(v: &Value, id: &str) -> std::result::Result<Trace, String> {
    if let Some(choices) = v.get("choices").and_then(Value::as_array) {
        let base = v.get("id").and_then(Value::as_str).unwrap_or(id);
        let name = |i: usize, c: &Value| match c.get("index").and_then(Value::as_u64).unwrap_or(i as u64) {
            0 => base.to_string(),
            k => format!("{base}/{k}"),
        };
        let requests = choices.iter().enumerate().map(|(i, c)| openai_choice(c, &name(i, c))).collect::<std::result::Result<_, _>>()?;
        return Ok(Trace { format: TraceFormat::OpenAi, requests });
    }
    if let Some(probs) = v.get("completion_probabilities").and_then(Value::as_array) {
        let base = v.get("id_slot").map_or(id.to_string(), |s| format!("slot {s}"));
        let mut r = llama_cpp(probs, &base)?;
        if let Some(tokens) = v.get("tokens").and_then(Value::as_array) {
            r.generated_ids = tokens.iter().map(|t| t.as_u64().and_then(|n| u32::try_from(n).ok())).collect::<Option<_>>().unwrap_or_default();
        }
        return Ok(Trace { format: TraceFormat::LlamaCpp, requests: vec![r] });
    }
    Err("is neither an OpenAI-compatible response (`choices`), llama.cpp's (`completion_probabilities`), sinkscope's stream.json nor JSONL with a `logprob` per line".into())
}

fn openai_choice(c: &Value, id: &str) -> std::result::Result<TraceRequest, String> {
    // A streamed chunk without logprobs (the role chunk, the finish chunk) adds no token; one
    // that carries text does, and its logprob is missing — refused wherever it stands, as the
    // first one is (a trace without logprobs).
    if let Some(delta) = c.get("delta").filter(|_| c.get("logprobs").is_none_or(Value::is_null)) {
        let text = ["content", "text"].iter().find_map(|k| delta.get(*k).and_then(Value::as_str)).unwrap_or("");
        if !text.is_empty() {
            return Err(format!("choice {id}: a streamed chunk with text ({text:?}) but no `logprobs`; request them for every chunk"));
        }
        return Ok(TraceRequest { id: id.to_string(), ..TraceRequest::default() });
    }
    let lp = c
        .get("logprobs")
        .filter(|l| !l.is_null())
        .ok_or_else(|| format!("choice {id} has no `logprobs`; request them (`logprobs: true` for chat, `logprobs: 1` for completions)"))?;
    let mut r = TraceRequest { id: id.to_string(), ..TraceRequest::default() };
    if let Some(content) = lp.get("content").and_then(Value::as_array) {
        // Chat: one object per token.
        for (i, t) in content.iter().enumerate() {
            r.logprobs.push(number(t.get("logprob"), || format!("choice {id}, token {i}: no numeric `logprob`"))?);
            r.tokens.push(t.get("token").and_then(Value::as_str).map(str::to_string));
            r.token_ids.push(token_id(t));
            r.cache_len.push(None);
        }
    } else if let Some(values) = lp.get("token_logprobs").and_then(Value::as_array) {
        // Completions: parallel arrays; an echoed prompt's first token has null.
        let tokens = lp.get("tokens").and_then(Value::as_array);
        for (i, v) in values.iter().enumerate() {
            if v.is_null() && i == 0 {
                continue;
            }
            r.logprobs.push(number(Some(v), || format!("choice {id}: token_logprobs[{i}] is not a number"))?);
            let token = tokens.and_then(|t| t.get(i)).and_then(Value::as_str);
            r.tokens.push(token.map(str::to_string));
            // vLLM's `return_tokens_as_token_ids` writes each token as "token_id:N".
            r.token_ids.push(token.and_then(|t| t.strip_prefix("token_id:")).and_then(|n| n.parse().ok()));
            r.cache_len.push(None);
        }
    } else {
        return Err(format!("choice {id}: `logprobs` has neither `content` (chat) nor `token_logprobs` (completions)"));
    }
    Ok(r)
}

/// The lowest log-probability a real trace can hold: a softmax over finite f64 logits bottoms out
/// near ln(f64::MIN_POSITIVE) ≈ −745 (f32: ≈ −104); anything lower is a placeholder or corruption.
pub const MIN_LOGPROB: f64 = -1000.0;

/// llama.cpp's `/completion` with `n_probs`: newer servers give each token's `logprob`, older
/// ones `probs` (top candidates with `tok_str`/`prob`) beside the token's `content`.
fn llama_cpp(probs: &[Value], id: &str) -> std::result::Result<TraceRequest, String> {
    let mut r = TraceRequest { id: id.to_string(), ..TraceRequest::default() };
    for (i, p) in probs.iter().enumerate() {
        let token = p.get("token").or_else(|| p.get("content")).and_then(Value::as_str).map(str::to_string);
        let logprob = if let Some(l) = p.get("logprob") {
            number(Some(l), || format!("completion_probabilities[{i}].logprob is not a number"))?
        } else if let Some(prob) = p.get("prob") {
            number(Some(prob), || format!("completion_probabilities[{i}].prob is not a number"))?.ln()
        } else {
            let chosen = p
                .get("probs")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c.get("tok_str").and_then(Value::as_str) == token.as_deref()));
            let prob = chosen.and_then(|c| c.get("prob")).and_then(Value::as_f64);
            prob.ok_or_else(|| format!("completion_probabilities[{i}]: the sampled token is not among its `probs` (raise n_probs, or use a server that returns `logprob`)"))?.ln()
        };
        r.logprobs.push(logprob);
        r.tokens.push(token);
        r.token_ids.push(token_id(p));
        r.cache_len.push(None);
    }
    Ok(r)
}

/// sinkscope's stream.json: each policy's stream is a request (logprob = −NLL, the cache length
/// after each step).
fn sinkscope_stream(v: &Value) -> std::result::Result<Trace, String> {
    let outcomes = v["outcomes"].as_array().ok_or("stream.json: `outcomes` is not a list")?;
    let mut requests = Vec::new();
    for (k, o) in outcomes.iter().enumerate() {
        let id = o.get("label").and_then(Value::as_str).map_or(format!("policy {k}"), str::to_string);
        let nll = o.get("nll").and_then(Value::as_array).ok_or_else(|| format!("stream.json: outcome {id} has no `nll`"))?;
        let lens = o.get("cache_len").and_then(Value::as_array);
        // nll[t] scores token t + 1 of the stream.
        let ids = v.get("tokens").and_then(Value::as_array);
        let id_at = |t: usize| ids.and_then(|l| l.get(t)).and_then(|x| x.get("id")).and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
        let mut r = TraceRequest { id, ..TraceRequest::default() };
        r.prompt_ids.extend(id_at(0));
        for (i, x) in nll.iter().enumerate() {
            // An unscored step (a sampled recompute) is skipped, not invented.
            let Some(x) = x.as_f64() else { continue };
            r.logprobs.push(-x);
            r.tokens.push(None);
            r.token_ids.push(id_at(i + 1));
            r.cache_len.push(cache_len(lens.and_then(|l| l.get(i))).map_err(|e| format!("stream.json: outcome {}, step {i}: {e}", r.id))?);
        }
        r.evictions = evictions_from_lengths(&r.cache_len);
        requests.push(r);
    }
    Ok(Trace { format: TraceFormat::SinkscopeStream, requests })
}

/// Token indices at which a cache stops growing or shrinks after growing (the start of each
/// run of evictions: a window's first full step, each `keep` half-discard).
pub fn evictions_from_lengths(lens: &[Option<usize>]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut grew = true;
    for i in 1..lens.len() {
        let (Some(a), Some(b)) = (lens[i - 1], lens[i]) else { continue };
        let evicting = b <= a;
        if evicting && grew {
            out.push(i);
        }
        grew = !evicting;
    }
    out
}

/// JSONL: a `logprob` per line (optional `token`, `cache_len`, a request id in `request`,
/// `request_id` or `id`), event lines (`"event": "eviction"` or `"evicted": n`) marking an
/// eviction before the next token; or one response per line.
fn from_jsonl(text: &str) -> std::result::Result<Trace, String> {
    let mut by_id: BTreeMap<String, (usize, TraceRequest)> = BTreeMap::new();
    let mut responses = Vec::new();
    let mut format = TraceFormat::Jsonl;
    for (n, line) in text.lines().enumerate() {
        // Server-sent events (a streamed response as logged): `data: {...}` lines, `data: [DONE]`.
        let line = line.trim();
        let line = line.strip_prefix("data:").map_or(line, str::trim_start);
        if line.is_empty() || line == "[DONE]" || line.starts_with(':') || line.starts_with("event:") {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {}: not JSON ({e})", n + 1))?;
        if v.get("choices").is_some() || v.get("completion_probabilities").is_some() {
            let t = response(&v, &format!("line {}", n + 1)).map_err(|e| format!("line {}: {e}", n + 1))?;
            format = t.format;
            // A streamed response's chunks share its id: their tokens join into one request.
            for r in t.requests {
                match responses.iter_mut().find(|x: &&mut TraceRequest| x.id == r.id) {
                    Some(x) => {
                        x.logprobs.extend(r.logprobs);
                        x.tokens.extend(r.tokens);
                        x.token_ids.extend(r.token_ids);
                        x.cache_len.extend(r.cache_len);
                    }
                    None => responses.push(r),
                }
            }
            continue;
        }
        // `id` names the request when it is text, the token when it is a number.
        let id = ["request", "request_id", "id"]
            .iter()
            .find_map(|k| v.get(*k).filter(|x| *k != "id" || !x.is_number()))
            .map_or(String::new(), |x| x.as_str().map_or(x.to_string(), str::to_string));
        let r = request_for(&mut by_id, id);
        let evicted = match v.get("evicted") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(e) => e.as_u64().ok_or_else(|| format!("line {}: `evicted` {e} is not a count ≥ 0 or true/false", n + 1))? > 0,
        };
        let event = v.get("event").and_then(Value::as_str).is_some_and(|e| e.starts_with("evict")) || evicted;
        if event && !r.evictions.contains(&r.logprobs.len()) {
            r.evictions.push(r.logprobs.len());
        }
        match v.get("logprob") {
            // A prompt token: logged with its id, scored by nothing.
            Some(Value::Null) if r.logprobs.is_empty() && token_id(&v).is_some() => r.prompt_ids.extend(token_id(&v)),
            Some(Value::Null) if token_id(&v).is_some() => {
                return Err(format!("line {}: a null `logprob` after scored tokens (only the prompt's tokens come unscored)", n + 1))
            }
            Some(l) => {
                r.logprobs.push(number(Some(l), || format!("line {}: `logprob` is not a number", n + 1))?);
                r.tokens.push(v.get("token").and_then(Value::as_str).map(str::to_string));
                r.token_ids.push(token_id(&v));
                r.cache_len.push(cache_len(v.get("cache_len")).map_err(|e| format!("line {}: {e}", n + 1))?);
            }
            None if event => {}
            None => return Err(format!("line {}: no `logprob` (and no eviction event)", n + 1)),
        }
    }
    let mut requests = in_order(by_id);
    requests.extend(responses);
    Ok(Trace { format, requests })
}

/// The request `id` of a line-per-token log, created (numbered in order of appearance) on its
/// first line.
fn request_for(by_id: &mut BTreeMap<String, (usize, TraceRequest)>, id: String) -> &mut TraceRequest {
    let order = by_id.len();
    &mut by_id.entry(id.clone()).or_insert_with(|| (order, TraceRequest { id, ..TraceRequest::default() })).1
}

/// The requests of a line-per-token log in the order they first appeared, each with the
/// evictions its cache lengths imply added to its explicit ones.
fn in_order(by_id: BTreeMap<String, (usize, TraceRequest)>) -> Vec<TraceRequest> {
    let mut requests: Vec<(usize, TraceRequest)> = by_id.into_values().collect();
    requests.sort_by_key(|(order, _)| *order);
    requests
        .into_iter()
        .map(|(_, mut r)| {
            merge_length_evictions(&mut r);
            r
        })
        .collect()
}

/// Adds the evictions the cache lengths imply to the explicit ones.
fn merge_length_evictions(r: &mut TraceRequest) {
    for e in evictions_from_lengths(&r.cache_len) {
        if !r.evictions.contains(&e) {
            r.evictions.push(e);
        }
    }
    r.evictions.sort_unstable();
}

/// CSV with a header naming a `logprob` column (optional `token`, `cache_len`, `request`,
/// `event`); fields may be double-quoted.
fn from_csv(text: &str) -> std::result::Result<Trace, String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = csv_fields(lines.next().unwrap_or_default());
    let col = |name: &str| header.iter().position(|h| h.trim().eq_ignore_ascii_case(name));
    let logprob = col("logprob").ok_or("is not JSON, and as CSV its header has no `logprob` column")?;
    let (token, cache, request, event) = (col("token"), col("cache_len"), col("request").or_else(|| col("request_id")), col("event"));
    let token_id = col("token_id");
    let mut by_id: BTreeMap<String, (usize, TraceRequest)> = BTreeMap::new();
    for (n, line) in lines.enumerate() {
        let f = csv_fields(line);
        if f.len() != header.len() {
            return Err(format!(
                "CSV row {}: {} fields where the header names {} (a ragged row, or an unquoted comma)",
                n + 2,
                f.len(),
                header.len()
            ));
        }
        let get = |c: Option<usize>| c.and_then(|c| f.get(c)).map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let r = request_for(&mut by_id, get(request).unwrap_or_default());
        if get(event).is_some_and(|e| e.starts_with("evict")) {
            r.evictions.push(r.logprobs.len());
        }
        let Some(l) = get(Some(logprob)) else {
            if get(event).is_some() {
                continue;
            }
            return Err(format!("CSV row {}: empty `logprob`", n + 2));
        };
        r.logprobs.push(l.parse::<f64>().map_err(|_| format!("CSV row {}: `logprob` {l:?} is not a number", n + 2))?);
        // A token's own spaces are part of it.
        r.tokens.push(token.and_then(|c| f.get(c)).filter(|t| !t.is_empty()).cloned());
        r.token_ids.push(get(token_id).and_then(|t| t.parse().ok()));
        let len = get(cache).map(|c| c.parse::<usize>().map_err(|_| format!("CSV row {}: `cache_len` {c:?} is not a count ≥ 0", n + 2)));
        r.cache_len.push(len.transpose()?);
    }
    Ok(Trace { format: TraceFormat::Csv, requests: in_order(by_id) })
}

/// One CSV line's fields (RFC 4180 quoting; no newlines inside fields).
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                if let Some(f) = fields.last_mut() {
                    f.push('"');
                }
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => {
                if let Some(f) = fields.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    fields
}

/// A token's id in a record: `token_id`, or `id` when it is a number (llama.cpp's probabilities).
fn token_id(v: &Value) -> Option<u32> {
    let n = v.get("token_id").or_else(|| v.get("id").filter(|x| x.is_number()))?;
    n.as_u64().and_then(|n| u32::try_from(n).ok())
}

/// A record's optional `cache_len`: absent or null, else a whole number ≥ 0.
fn cache_len(v: Option<&Value>) -> std::result::Result<Option<usize>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n.as_u64().map(|n| Some(n as usize)).ok_or_else(|| format!("`cache_len` {n} is not a count ≥ 0")),
    }
}

fn number(v: Option<&Value>, why: impl Fn() -> String) -> std::result::Result<f64, String> {
    v.and_then(Value::as_f64).ok_or_else(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ids_come_from_every_format_that_has_them() {
        // JSONL: a null logprob marks a prompt token; a numeric `id` is the token, a text one the request.
        let t = parse_trace("{\"id\": 5, \"logprob\": null}\n{\"id\": 7, \"logprob\": -1.5}\n{\"id\": \"r1\", \"token_id\": 9, \"logprob\": -0.5}\n")
            .unwrap();
        assert_eq!((t.requests[0].prompt_ids.clone(), t.requests[0].token_ids.clone()), (vec![5], vec![Some(7)]));
        assert_eq!((t.requests[1].id.as_str(), t.requests[1].token_ids.clone()), ("r1", vec![Some(9)]));
        assert!(parse_trace("{\"id\": 7, \"logprob\": -1.5}\n{\"id\": 5, \"logprob\": null}\n").unwrap_err().contains("line 2"));
        // llama.cpp's /completion with n_probs.
        let t = parse_trace(r#"{"completion_probabilities": [{"id": 42, "token": " a", "logprob": -0.25, "top_logprobs": []}]}"#).unwrap();
        assert_eq!(t.requests[0].token_ids, vec![Some(42)]);
        let t = parse_trace(r#"{"tokens": [41, 42], "completion_probabilities": [{"id": 42, "logprob": -0.25}]}"#).unwrap();
        assert_eq!(t.requests[0].generated_ids, vec![41, 42]);
        // vLLM completions with return_tokens_as_token_ids; chat content entries with an id.
        let t = parse_trace(r#"{"choices": [{"logprobs": {"tokens": ["token_id:3"], "token_logprobs": [-0.1]}}]}"#).unwrap();
        assert_eq!(t.requests[0].token_ids, vec![Some(3)]);
        let t = parse_trace(r#"{"choices": [{"logprobs": {"content": [{"id": 11, "token": "x", "logprob": -0.2}]}}]}"#).unwrap();
        assert_eq!(t.requests[0].token_ids, vec![Some(11)]);
        // CSV with a token_id column; a trace without ids has None per token.
        let t = parse_trace("token_id,logprob\n4,-0.3\n").unwrap();
        assert_eq!(t.requests[0].token_ids, vec![Some(4)]);
        let t = parse_trace("{\"logprob\": -0.3}\n").unwrap();
        assert_eq!(t.requests[0].token_ids, vec![None]);
    }

    /// Each record is checked wherever it stands in the trace (issue 43).
    #[test]
    fn malformed_records_are_refused_wherever_they_stand() {
        let ok = "{\"logprob\": -0.3, \"cache_len\": 4}\n";
        for (bad, says) in [
            ("{\"logprob\": -0.3, \"cache_len\": -2}", "line 2: `cache_len` -2 is not a count ≥ 0"),
            ("{\"logprob\": -0.3, \"cache_len\": \"many\"}", "line 2: `cache_len` \"many\" is not a count"),
            ("{\"evicted\": -1}", "line 2: `evicted` -1 is not a count ≥ 0"),
            (
                r#"{"id": "c", "choices": [{"delta": {"content": " the"}, "logprobs": null}]}"#,
                "a streamed chunk with text (\" the\") but no `logprobs`",
            ),
        ] {
            let e = parse_trace(&format!("{ok}{bad}\n")).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        // The role and finish chunks of a stream carry no text and add no token.
        let role = r#"{"id": "c", "choices": [{"delta": {"role": "assistant", "content": ""}, "logprobs": null}]}"#;
        let token = r#"{"id": "c", "choices": [{"delta": {"content": "a"}, "logprobs": {"content": [{"token": "a", "logprob": -0.5}]}}]}"#;
        assert_eq!(parse_trace(&format!("{role}\n{token}\n")).unwrap().requests[0].logprobs, [-0.5]);
        let e = parse_trace("token,logprob\na,-0.1\nb,-0.2,7\nc,-0.3\n").unwrap_err();
        assert!(e.contains("CSV row 3: 3 fields where the header names 2"), "{e}");
        let e = parse_trace("logprob,cache_len\n-0.1,3\n-0.2,-1\n").unwrap_err();
        assert!(e.contains("CSV row 3: `cache_len` \"-1\" is not a count"), "{e}");
    }
}
