//! The layer rule of `src/lib.rs`, checked from the source: every `crate::…`, `super::…`,
//! `self::…` and child-module path (grouped `use crate::{…}` included) in every file under `src/`
//! points to a module of a lower layer than its own top-level module, and no two files import
//! each other through any chain. The layers are read from the picture at the top of `src/lib.rs`
//! (lines `//! - L<n> \`module\` …`), so the picture and the rule cannot drift apart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type ModPath = Vec<String>;

/// Every `.rs` file under `dir`, with its module path (`src/a/mod.rs` and `src/a.rs` are `[a]`).
fn source_files(root: &Path) -> BTreeMap<ModPath, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(root, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(root).unwrap().with_extension("");
        let mut parts: ModPath = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
            parts.pop();
        }
        // main.rs is the binary's root, a crate of its own over the library.
        if f.file_name().is_some_and(|n| n == "main.rs") {
            continue;
        }
        out.insert(parts, f);
    }
    out
}

/// The source without comments (strings and char literals kept, since serde attributes name
/// functions inside strings; a `//` inside a string is not a comment).
fn strip_comments(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            out.push(c);
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(b[i]);
                    i += 1;
                }
                if i < b.len() {
                    out.push(b[i]);
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || b.get(i + 2) == Some(&'\'')) {
            // A char literal ('"', '\n', '\''); a lifetime ('a) has no closing quote.
            let end = if next == Some('\\') { (i + 2..b.len()).find(|&j| b[j] == '\'').unwrap_or(b.len()) } else { i + 2 };
            out.push_str("' '");
            i = end + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Expands a use tree (`a::{b, c::{d, e}}`) into its paths.
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    fn rec(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            let (mut depth, mut start) = (0, 0);
            for (i, ch) in inner.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        rec(prefix, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            rec(prefix, &inner[start..], out);
            return;
        }
        if let Some(i) = tree.find("::{") {
            let mut p = prefix.to_vec();
            p.extend(tree[..i].split("::").map(|s| s.trim().to_string()));
            rec(&p, &tree[i + 2..], out);
            return;
        }
        let mut p = prefix.to_vec();
        let body = tree.split(" as ").next().unwrap_or(tree);
        p.extend(body.split("::").map(|s| s.trim().to_string()).filter(|s| !s.is_empty()));
        out.push(p);
    }
    let mut out = Vec::new();
    rec(&[], &tree.chars().filter(|c| !c.is_whitespace() || *c == ' ').collect::<String>(), &mut out);
    out
}

/// The module a path names, from the file of module `cur`: the longest prefix that is a module.
fn resolve(cur: &ModPath, path: &[String], modules: &BTreeMap<ModPath, PathBuf>) -> Option<ModPath> {
    let first = path.first()?.as_str();
    let (mut base, rest): (ModPath, &[String]) = match first {
        "crate" | "$crate" => (Vec::new(), &path[1..]),
        "self" => (cur.clone(), &path[1..]),
        "super" => {
            let mut base = cur.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            (base, rest)
        }
        // A child module used by a relative path (`use heads::classify;` in analysis/mod.rs).
        child if modules.contains_key(&[cur.as_slice(), &[child.to_string()]].concat()) => (cur.clone(), path),
        _ => return None,
    };
    base.extend(rest.iter().cloned());
    (0..=base.len()).rev().map(|n| base[..n].to_vec()).find(|m| modules.contains_key(m))
}

/// The modules a file refers to, other than itself. Inline modules (`mod tests { … }`) are read
/// as what they are, children of the file's module, so their `super::` is the file itself.
fn references(cur: &ModPath, src: &str, modules: &BTreeMap<ModPath, PathBuf>) -> BTreeSet<ModPath> {
    let (code, inline) = split_inline_modules(&strip_comments(src));
    let mut out = paths_in(cur, &code, modules);
    for (name, body) in inline {
        let child: ModPath = [cur.as_slice(), &[name]].concat();
        out.extend(paths_in(&child, &body, modules).into_iter().filter(|m| *m != child));
    }
    out.remove(cur);
    out
}

/// The code outside inline `mod NAME { … }` blocks, and each block's name and body.
fn split_inline_modules(code: &str) -> (String, Vec<(String, String)>) {
    let mut outside = String::new();
    let mut inline = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("mod ") {
        let starts_word = i == 0 || !is_ident(rest[..i].chars().last().unwrap_or(' '));
        let after = &rest[i + 4..];
        let name: String = after.chars().take_while(|&c| is_ident(c)).collect();
        let tail = after[name.len()..].trim_start();
        if !starts_word || name.is_empty() || !tail.starts_with('{') {
            outside.push_str(&rest[..i + 4]);
            rest = after;
            continue;
        }
        outside.push_str(&rest[..i]);
        let open = rest.len() - tail.len();
        let mut depth = 0usize;
        let mut end = rest.len();
        for (j, ch) in rest[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        inline.push((name, rest[open + 1..end.saturating_sub(1).max(open + 1)].to_string()));
        rest = &rest[end..];
    }
    outside.push_str(rest);
    (outside, inline)
}

/// The modules the paths in `code` name, read from the module `cur`.
fn paths_in(cur: &ModPath, code: &str, modules: &BTreeMap<ModPath, PathBuf>) -> BTreeSet<ModPath> {
    let mut paths: Vec<Vec<String>> = Vec::new();
    // `use` statements, grouped trees included.
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let starts_word = i == 0 || !is_ident(rest[..i].chars().last().unwrap_or(' '));
        let after = &rest[i + 4..];
        if starts_word {
            if let Some(end) = after.find(';') {
                paths.extend(expand_use_tree(&after[..end]));
            }
        }
        rest = after;
    }
    // Paths written inline (`crate::model::load(…)`, `super::tokens::label`, `#[serde(with = "crate::…")]`).
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let at_start = i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':');
        if at_start && (is_ident(chars[i]) || chars[i] == '$') {
            let mut j = i;
            let mut path = Vec::new();
            loop {
                let s = j;
                while j < chars.len() && (is_ident(chars[j]) || (j == s && chars[j] == '$')) {
                    j += 1;
                }
                path.push(chars[s..j].iter().collect::<String>());
                if chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') && chars.get(j + 2).is_some_and(|&c| is_ident(c)) {
                    j += 2;
                } else {
                    break;
                }
            }
            if path.len() > 1 {
                paths.push(path);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    paths.iter().filter_map(|p| resolve(cur, p, modules)).collect()
}

/// Layer of each top-level module, from the `//! - L<n> …` lines of lib.rs: each ` · `-separated
/// part of a line names its module first, in backticks (later backticks are prose).
fn layers(lib: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("//! - L") else { continue };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(level) = digits.parse::<usize>() else { continue };
        for part in rest.split(" · ") {
            if let Some(name) = part.split('`').nth(1).filter(|n| !n.is_empty() && n.chars().all(is_ident)) {
                out.insert(name.to_string(), level);
            }
        }
    }
    out
}

fn graph() -> (BTreeMap<ModPath, BTreeSet<ModPath>>, BTreeMap<ModPath, PathBuf>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = source_files(&root);
    let mut edges = BTreeMap::new();
    for (m, path) in &modules {
        let src = std::fs::read_to_string(path).unwrap();
        edges.insert(m.clone(), references(m, &src, &modules));
    }
    (edges, modules)
}

fn name(m: &ModPath) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("/")
    }
}

#[test]
fn every_import_points_to_a_lower_layer() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let layer = layers(&lib);
    let (edges, modules) = graph();
    let tops: BTreeSet<&String> = modules.keys().filter_map(|m| m.first()).collect();
    let unplaced: Vec<&&String> = tops.iter().filter(|t| !layer.contains_key(t.as_str())).collect();
    assert!(unplaced.is_empty(), "top-level modules missing from the layer picture in src/lib.rs: {unplaced:?}");
    let mut wrong = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            let (Some(a), Some(b)) = (from.first(), to.first()) else {
                if from.is_empty() || to.is_empty() {
                    // lib.rs declares modules; nothing may import through the crate root.
                    if !from.is_empty() {
                        wrong.push(format!("{} imports through the crate root (use the module's own path)", name(from)));
                    }
                }
                continue;
            };
            if a != b && layer[b] >= layer[a] {
                wrong.push(format!("{} (L{}) imports {} (L{})", name(from), layer[a], name(to), layer[b]));
            }
        }
    }
    assert!(wrong.is_empty(), "imports that do not point down:\n{}", wrong.join("\n"));
}

#[test]
fn no_two_files_import_each_other_through_any_chain() {
    let (edges, _) = graph();
    // Tarjan's strongly connected components; any component of two or more files is a cycle.
    struct State<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        cycles: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a ModPath) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            let Some((w, _)) = s.edges.get_key_value(w) else { continue };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(name(w));
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.cycles.push(comp);
            }
        }
    }
    let mut s =
        State { edges: &edges, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), cycles: Vec::new() };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    assert!(s.cycles.is_empty(), "files that import each other: {:?}", s.cycles);
}

#[test]
fn no_source_file_is_over_600_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    for dir in ["src", "tests", "benches"] {
        let mut files = Vec::new();
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = entry.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        walk(&root.join(dir), &mut files);
        for f in files {
            let n = std::fs::read_to_string(&f).unwrap().lines().count();
            if n > 600 {
                long.push(format!("{} ({n} lines)", f.strip_prefix(root).unwrap().display()));
            }
        }
    }
    assert!(long.is_empty(), "files over 600 lines: {long:?}");
}

/// The README is the front door: what it is, the two commands, the tour, where to read more.
/// Measurements go to docs/findings.md, each with the command that reruns it.
#[test]
fn the_readme_stays_a_front_door() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let n = readme.lines().count();
    assert!(n <= 300, "README.md has {n} lines (at most 300): move measurements to docs/findings.md");
}

#[test]
fn the_checker_sees_grouped_relative_and_inline_paths() {
    let modules: BTreeMap<ModPath, PathBuf> =
        [vec![], vec!["a".to_string()], vec!["a".into(), "b".into()], vec!["c".into()], vec!["c".into(), "d".into()]]
            .into_iter()
            .map(|m| (m, PathBuf::new()))
            .collect();
    let cur: ModPath = vec!["a".into()];
    let src = r#"
        use crate::{c::{d::X, Y}, a::b};
        // use crate::c::d; (a comment is no import)
        use b::Z;
        fn f() { let s = "// not a comment"; crate::c::g(s); }
        #[serde(with = "crate::c::d::h")]
        struct S;
    "#;
    let refs = references(&cur, src, &modules);
    let want: BTreeSet<ModPath> = [vec!["c".to_string()], vec!["c".into(), "d".into()], vec!["a".into(), "b".into()]].into_iter().collect();
    assert_eq!(refs, want);
    let only_comment = references(&cur, "// use crate::c::d;\nfn f() {}", &modules);
    assert!(only_comment.is_empty(), "{only_comment:?}");
}
