// SPDX-License-Identifier: Apache-2.0
//! The committed declarations (src/bindings.rs) against the header they were
//! generated from (api/fusednorm.h, api/fusednorm_version.h): every function
//! with the same argument and return types, every enum value, every opaque
//! typedef and integer #define. Parsed independently of gen/rust_sys.py, so a
//! header change without `python3 bindings/rust/gen/rust_sys.py` fails here.
use std::collections::BTreeMap;
use std::path::PathBuf;

const BINDINGS: &str = include_str!("../src/bindings.rs");

/// FUSEDNORM_API_DIR (another header to compare), else FUSEDNORM_REPO/api
/// (gpu-test.sh runs these binaries in another checkout), else the api/ of
/// the checkout this crate was built in.
fn api_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FUSEDNORM_API_DIR") {
        return PathBuf::from(d);
    }
    match std::env::var_os("FUSEDNORM_REPO") {
        Some(r) => PathBuf::from(r).join("api"),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../api"),
    }
}

fn read(name: &str) -> String {
    let p = api_dir().join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {} ({e}); set FUSEDNORM_API_DIR", p.display()))
}

fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            let end = s[i + 2..].find("*/").map(|e| i + 2 + e + 2).unwrap_or(b.len());
            out.push(' ');
            i = end;
        } else if b[i..].starts_with(b"//") {
            let end = s[i..].find('\n').map(|e| i + e).unwrap_or(b.len());
            i = end;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// A C type written canonically: "const void *", "struct ncclComm * *".
fn canon_c(t: &str) -> String {
    let spaced = t.replace('*', " * ");
    let toks: Vec<&str> = spaced.split_whitespace().collect();
    let stars = toks.iter().filter(|t| **t == "*").count();
    let first_star = toks.iter().position(|t| *t == "*").unwrap_or(toks.len());
    assert!(!toks[first_star..].contains(&"const"), "const pointer not handled: {t}");
    let konst = toks.contains(&"const");
    let base: Vec<&str> = toks[..first_star].iter().copied().filter(|t| *t != "const").collect();
    let mut s = format!("{}{}", if konst { "const " } else { "" }, base.join(" "));
    for _ in 0..stars {
        s.push_str(" *");
    }
    s
}

/// A Rust type from bindings.rs written as canon_c writes the C one.
fn canon_rust(t: &str) -> String {
    let mut rest = t.trim();
    let mut levels = Vec::new();
    loop {
        if let Some(r) = rest.strip_prefix("*const ") {
            levels.push(true);
            rest = r.trim();
        } else if let Some(r) = rest.strip_prefix("*mut ") {
            levels.push(false);
            rest = r.trim();
        } else {
            break;
        }
    }
    let base = match rest {
        "c_void" => "void".to_string(),
        "c_char" => "char".into(),
        "c_int" => "int".into(),
        "f32" => "float".into(),
        "f64" => "double".into(),
        "usize" => "size_t".into(),
        "i32" => "int32_t".into(),
        "i64" => "int64_t".into(),
        "u32" => "uint32_t".into(),
        "ncclComm" | "CUstream_st" => format!("struct {rest}"),
        other if other.starts_with("fnorm_") && other.ends_with("_t") => other.into(),
        other => panic!("bindings.rs: unknown Rust type {other:?}"),
    };
    // Only the innermost level may point to const (all the header uses).
    assert!(levels.iter().rev().skip(1).all(|c| !c), "bindings.rs: const at an outer level: {t}");
    let konst = levels.last().copied().unwrap_or(false);
    let mut s = format!("{}{}", if konst { "const " } else { "" }, base);
    for _ in &levels {
        s.push_str(" *");
    }
    s
}

type Sig = (String, Vec<String>); // return type, argument types

fn header_functions(h: &str) -> BTreeMap<String, Sig> {
    let no_pp: String = h.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n");
    let mut out = BTreeMap::new();
    for chunk in no_pp.split("FNORM_API").skip(1) {
        let decl = &chunk[..chunk.find(';').expect("FNORM_API declaration without ';'")];
        let open = decl.find('(').expect("no '('");
        let close = decl.rfind(')').expect("no ')'");
        let head = decl[..open].trim();
        let name_at = head.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map(|i| i + 1).unwrap_or(0);
        let name = head[name_at..].to_string();
        let ret = canon_c(&head[..name_at]);
        let params = decl[open + 1..close].trim();
        let args = if params == "void" || params.is_empty() {
            Vec::new()
        } else {
            params
                .split(',')
                .map(|p| {
                    let p = p.trim();
                    let cut = p.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).expect("parameter without a type");
                    canon_c(&p[..=cut])
                })
                .collect()
        };
        assert!(out.insert(name.clone(), (ret, args)).is_none(), "{name} declared twice");
    }
    out
}

fn rust_functions() -> BTreeMap<String, Sig> {
    let mut out = BTreeMap::new();
    for line in BINDINGS.lines().map(str::trim).filter(|l| l.starts_with("pub fn ")) {
        let open = line.find('(').unwrap();
        let close = line.rfind(") -> ").expect("function without a return type");
        let name = line["pub fn ".len()..open].to_string();
        let ret = canon_rust(line[close + 5..].trim_end_matches(';'));
        let params = &line[open + 1..close];
        let args = if params.is_empty() {
            Vec::new()
        } else {
            params.split(", ").map(|p| canon_rust(&p[p.find(": ").expect("arg without type") + 2..])).collect()
        };
        out.insert(name, (ret, args));
    }
    out
}

fn header_constants(h: &str, v: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let src = strip_comments(h);
    let mut rest = src.as_str();
    while let Some(at) = rest.find("typedef enum") {
        let body_start = rest[at..].find('{').unwrap() + at + 1;
        let body_end = rest[body_start..].find('}').unwrap() + body_start;
        for item in rest[body_start..body_end].split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, val) = item.split_once('=').unwrap_or_else(|| panic!("enum value without '=': {item}"));
            out.insert(k.trim().to_string(), val.trim().parse::<i64>().expect("enum value not an integer"));
        }
        rest = &rest[body_end..];
    }
    for text in [h, v] {
        for line in strip_comments(text).lines() {
            let t: Vec<&str> = line.split_whitespace().collect();
            if t.len() == 3 && t[0] == "#define" && t[1].starts_with("FNORM_") {
                if let Ok(n) = t[2].parse::<i64>() {
                    out.insert(t[1].to_string(), n);
                }
            }
        }
    }
    out
}

fn rust_constants() -> BTreeMap<String, i64> {
    BINDINGS
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .map(|l| {
            let (name, rest) = l.split_once(':').unwrap();
            let value = rest.split_once('=').unwrap().1.trim().trim_end_matches(';');
            (name.to_string(), value.parse::<i64>().unwrap())
        })
        .collect()
}

fn diff<V: PartialEq + std::fmt::Debug>(what: &str, h: &BTreeMap<String, V>, r: &BTreeMap<String, V>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, hv) in h {
        match r.get(k) {
            None => out.push(format!("{what} {k}: in the header, not in bindings.rs")),
            Some(rv) if rv != hv => out.push(format!("{what} {k}: header {hv:?}, bindings.rs {rv:?}")),
            _ => {}
        }
    }
    for k in r.keys().filter(|k| !h.contains_key(*k)) {
        out.push(format!("{what} {k}: in bindings.rs, not in the header"));
    }
    out
}

#[test]
fn declarations_match_the_header() {
    let h = read("fusednorm.h");
    let v = read("fusednorm_version.h");
    let hf = header_functions(&strip_comments(&h));
    let rf = rust_functions();
    assert!(hf.len() >= 40, "parsed only {} functions from the header", hf.len());
    let mut problems = diff("function", &hf, &rf);
    let mut hc = header_constants(&h, &v);
    // FNORM_VERSION is an expression in the header; check its encoding here.
    hc.insert("FNORM_VERSION".into(), hc["FNORM_VERSION_MAJOR"] * 10000 + hc["FNORM_VERSION_MINOR"] * 100 + hc["FNORM_VERSION_PATCH"]);
    problems.extend(diff("constant", &hc, &rust_constants()));
    assert!(problems.is_empty(), "header and committed declarations drifted (run python3 bindings/rust/gen/rust_sys.py):\n{}", problems.join("\n"));
}

#[test]
fn opaque_typedefs_match_the_header() {
    let h = strip_comments(&read("fusednorm.h"));
    let mut header = BTreeMap::new();
    for part in h.split("typedef struct").skip(1) {
        let decl = &part[..part.find(';').unwrap()];
        let (tag, name) = decl.split_once('*').unwrap();
        header.insert(name.trim().to_string(), tag.trim().to_string());
    }
    let rust: BTreeMap<String, String> = BINDINGS
        .lines()
        .filter_map(|l| l.strip_prefix("pub type "))
        .filter_map(|l| l.split_once(" = *mut "))
        .map(|(n, t)| (n.to_string(), t.trim_end_matches(';').to_string()))
        .collect();
    let problems = diff("typedef", &header, &rust);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn symbols_txt_is_what_bindings_declare() {
    let list = read("symbols.txt");
    let listed: Vec<&str> = list.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let declared = rust_functions();
    for s in &listed {
        assert!(declared.contains_key(*s), "{s} (api/symbols.txt) is not declared in bindings.rs");
    }
    assert_eq!(listed.len(), declared.len(), "bindings.rs declares functions api/symbols.txt does not list");
}

#[test]
fn the_linked_library_is_this_version() {
    // Calls into the library: proves build.rs linked it.
    let v = unsafe { fusednorm_sys::fnorm_get_version() };
    assert_eq!(v, fusednorm_sys::FNORM_VERSION, "library version {v}, header {}", fusednorm_sys::FNORM_VERSION);
}
