//! `include/hipobj.h` is maintained by hand; these tests hold it to the library:
//! the exported `hipObj*` symbols and the header's declarations are the same set, and every
//! struct layout and constant the header states equals the Rust side's (checked by the C
//! compiler with `_Static_assert`, in C and, when a C++ compiler exists, in C++).

mod support;

use std::collections::BTreeSet;
use std::process::Command;

use support::*;

fn header() -> String {
    std::fs::read_to_string(crate_dir().join("include/hipobj.h")).unwrap()
}

/// Function names declared with `HIPOBJ_API` (declarations may span lines).
fn declared() -> BTreeSet<String> {
    let text = header();
    let mut out = BTreeSet::new();
    for decl in text.split("HIPOBJ_API ").skip(1) {
        // Skip the `#define HIPOBJ_API ...` lines themselves.
        let Some(paren) = decl.find('(') else {
            continue;
        };
        let head = &decl[..paren];
        if head.contains('\n') || head.contains("__attribute__") {
            continue;
        }
        let name = head
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .next()
            .unwrap();
        out.insert(name.to_owned());
    }
    out
}

fn exported() -> BTreeSet<String> {
    let so = lib_dir().join("libhipobj.so");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("nm (binutils) is needed for this test");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_addr, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind == "T" && name.starts_with("hipObj")).then(|| name.to_owned())
        })
        .collect()
}

#[test]
fn declared_functions_are_exactly_the_exported_ones() {
    let (d, e) = (declared(), exported());
    assert!(d.len() >= 20, "parsed only {d:?}");
    assert_eq!(
        d,
        e,
        "declared but not exported: {:?}; exported but not declared: {:?}",
        d.difference(&e).collect::<Vec<_>>(),
        e.difference(&d).collect::<Vec<_>>()
    );
}

/// A translation unit asserting every layout fact and constant, compiled with `compiler`.
fn static_asserts(compiler: &str, lang: &str) {
    let mut src = String::from("#include <stddef.h>\n#include \"hipobj.h\"\n");
    let assert_kw = if lang == "c" {
        "_Static_assert"
    } else {
        "static_assert"
    };
    for (expr, value) in hipobj::types::layout_facts() {
        src.push_str(&format!("{assert_kw}({expr} == {value}, \"{expr}\");\n"));
    }
    for (name, value) in hipobj::types::constant_facts() {
        src.push_str(&format!("{assert_kw}({name} == {value}LL, \"{name}\");\n"));
    }
    // Every error code has a name in the header, and the enum is int-sized as Rust assumes.
    src.push_str(&format!(
        "{assert_kw}(sizeof(hipObjOpError_t) == sizeof(int), \"enum size\");\n"
    ));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("asserts.{lang}"));
    std::fs::write(&file, &src).unwrap();
    let std_flag = if lang == "c" {
        "-std=c11"
    } else {
        "-std=c++17"
    };
    let out = Command::new(compiler)
        .args([
            std_flag,
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
        ])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(&file)
        .output()
        .expect("running the compiler");
    assert!(
        out.status.success(),
        "{compiler}: header disagrees with the library:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn layouts_and_constants_match_in_c() {
    static_asserts("cc", "c");
}

#[test]
fn layouts_and_constants_match_in_cpp() {
    assert!(
        Command::new("c++").arg("--version").output().is_ok(),
        "this test needs a C++ compiler `c++` (apt-get install g++; .ci/run installs it)"
    );
    static_asserts("c++", "cpp");
}

#[test]
fn version_string_matches_the_header() {
    let v = env!("CARGO_PKG_VERSION");
    let s = hipobj::ffi::hipObjGetVersionString();
    let text = unsafe_cstr(s);
    assert!(text.starts_with(&format!("hipobj-rs {v} ")), "{text}");
}

fn unsafe_cstr(p: *const std::ffi::c_char) -> String {
    assert!(!p.is_null());
    #[allow(unsafe_code)]
    // SAFETY: `hipObjGetVersionString` returns a pointer to a static NUL-terminated string.
    let s = unsafe { std::ffi::CStr::from_ptr(p) };
    s.to_string_lossy().into_owned()
}
