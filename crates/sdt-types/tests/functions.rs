//! Functions and source lines from DWARF: the parameters of the function
//! at an address (found by its symbol in the fixture's symbol table), as
//! the source declares them, and the address of a source line's code,
//! checked against `addr2line`. The fixture (`tests/fixtures/dwarf/
//! params.c`) is built whole, with split DWARF (`.dwo`), and with its
//! debug information in a separate file found through `--debuginfo`.

use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSymbol};
use sdt_testing::fixture::C;
use sdt_types::{DebugInfo, LineLookup, SourceLine};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/dwarf")
}

/// Builds the fixture with `flags` (to `params.c`) as `name`.
fn build(name: &str, flags: &[&str]) -> Option<PathBuf> {
    if !sdt_testing::require(sdt_testing::have("cc"), "a C compiler (cc)") {
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdt-types-functions");
    // The .dwo files are named after the objects, so each build compiles
    // in a directory of its own.
    let work = dir.join(format!("{name}.d"));
    let object = |source: &str, flags: &[&str]| {
        C::new(fixture_dir().join(format!("{source}.c")))
            .flags(&["-O2", "-no-pie", "-c"])
            .flags(flags)
            .dir(&work)
            .output(&format!("{source}.o"))
            .build()
    };
    let program = C::new(object("params", flags))
        .source(object("nodebug", &[]))
        .flags(&["-no-pie"])
        .dir(&dir)
        .output(name)
        .build();
    Some(program)
}

fn symbol(program: &Path, name: &str) -> u64 {
    let data = std::fs::read(program).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("{name} in {}", program.display()))
        .address()
}

/// `TYPE NAME` of each parameter, as `-lv` lists them.
fn params(info: &DebugInfo, program: &Path, function: &str) -> Vec<String> {
    let f = info
        .function_at(symbol(program, function))
        .unwrap()
        .unwrap_or_else(|| panic!("{function} is described"));
    assert_eq!(f.name.as_deref(), Some(function));
    f.params
        .iter()
        .map(|p| {
            format!(
                "{} {}",
                info.bpftrace_type_name(Some(p.ty)).unwrap(),
                p.name.as_deref().unwrap_or("")
            )
        })
        .collect()
}

fn check_params(info: &DebugInfo, program: &Path) {
    assert_eq!(
        params(info, program, "scalars"),
        [
            "int n",
            "char c",
            "short unsigned int u",
            "long int big",
            "enum color color",
            "_Bool flag"
        ]
    );
    assert_eq!(
        params(info, program, "pointers"),
        ["const char* text", "struct node* node", "int* count"]
    );
    assert_eq!(
        params(info, program, "small_structs"),
        ["struct point p", "struct triple t", "int after"]
    );
    assert_eq!(params(info, program, "main"), ["int argc", "char** argv"]);
    let f = info
        .function_at(symbol(program, "returns_wide"))
        .unwrap()
        .unwrap();
    assert_eq!(
        info.c_name(f.returns).unwrap(),
        "struct wide",
        "the return type"
    );
    assert!(!f.nocall && !f.cplusplus && !f.variadic);
    // No unit describes the function built without -g; an address inside
    // a function is not where one starts.
    assert_eq!(
        info.function_at(symbol(program, "without_debug_info"))
            .unwrap(),
        None
    );
    assert_eq!(
        info.function_at(symbol(program, "scalars") + 1).unwrap(),
        None
    );
}

/// The line of the fixture whose text contains `marker`.
fn line_of(marker: &str) -> u64 {
    let source = std::fs::read_to_string(fixture_dir().join("params.c")).unwrap();
    source
        .lines()
        .position(|l| l.contains(marker))
        .expect("the marker is in the source") as u64
        + 1
}

/// Checks the lookups of lines; returns the address of one, which
/// `addr2line` maps back to it when `cross_check`.
fn check_lines(info: &DebugInfo, program: &Path, cross_check: bool) -> u64 {
    let line = line_of("sum += on_stack(");
    let at = |file: &str, column| SourceLine {
        file: file.into(),
        line,
        column,
    };
    let LineLookup::Found { address, path } = info.line_address(&at("params.c", None)).unwrap()
    else {
        panic!("line {line} has code");
    };
    assert!(path.ends_with("tests/fixtures/dwarf/params.c"), "{path:?}");
    // addr2line, an independent reader, maps the address back to the line.
    if cross_check && sdt_testing::require(sdt_testing::have("addr2line"), "addr2line (binutils)") {
        let out = Command::new("addr2line")
            .arg("-e")
            .arg(program)
            .arg(format!("{address:#x}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.trim().ends_with(&format!("params.c:{line}"))
                || text.contains(&format!("params.c:{line} ")),
            "{address:#x} is {text}"
        );
    }
    // A longer suffix of the path names the same file.
    assert!(matches!(
        info.line_address(&at("dwarf/params.c", None)).unwrap(),
        LineLookup::Found { address: a, .. } if a == address
    ));
    // A partial name is not a file.
    let LineLookup::NoFile { close } = info.line_address(&at("arams.c", None)).unwrap() else {
        panic!("arams.c is no file")
    };
    assert!(close.contains(&"params.c".to_string()), "{close:?}");
    // A comment has no code: the nearest lines that do are named.
    let comment = line_of("no code on the next line") + 1;
    let LineLookup::NoCode { before, after, .. } = info
        .line_address(&SourceLine {
            file: "params.c".into(),
            line: comment,
            column: None,
        })
        .unwrap()
    else {
        panic!("line {comment} has no code");
    };
    assert!(before.is_some_and(|b| b < comment) && after.is_some_and(|a| a > comment));
    address
}

#[test]
fn parameters_and_lines_of_a_whole_build() {
    let Some(program) = build("params", &["-g"]) else {
        return;
    };
    let info = DebugInfo::open(&program).unwrap();
    check_params(&info, &program);
    check_lines(&info, &program, true);
}

#[test]
fn parameters_and_lines_with_split_dwarf() {
    let (Some(whole), Some(program)) = (
        build("params-whole", &["-g"]),
        build("params-split", &["-g", "-gsplit-dwarf"]),
    ) else {
        return;
    };
    let info = DebugInfo::open(&program).unwrap();
    check_params(&info, &program);
    // addr2line reads no .dwo; the same code built whole is the reference.
    let whole = check_lines(&DebugInfo::open(&whole).unwrap(), &whole, true);
    assert_eq!(check_lines(&info, &program, false), whole);
}

#[test]
fn parameters_and_lines_from_a_dwarf_package() {
    if !sdt_testing::require(sdt_testing::have("llvm-dwp"), "llvm-dwp (Debian llvm)") {
        return;
    }
    // llvm-dwp 14 does not finish on GCC's -O2 location lists; -O0 has
    // none to speak of.
    let (Some(whole), Some(program)) = (
        build("params-whole-O0", &["-g", "-O0"]),
        build("params-package", &["-g", "-O0", "-gsplit-dwarf"]),
    ) else {
        return;
    };
    let package = program.with_extension("dwp");
    let status = Command::new("llvm-dwp")
        .arg("-e")
        .arg(&program)
        .arg("-o")
        .arg(&package)
        .status()
        .unwrap();
    assert!(status.success());
    // Only the package is left.
    let work = program.with_extension("d");
    for entry in std::fs::read_dir(&work).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "dwo") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let info = DebugInfo::open(&program).unwrap();
    check_params(&info, &program);
    let whole = check_lines(&DebugInfo::open(&whole).unwrap(), &whole, true);
    assert_eq!(check_lines(&info, &program, false), whole);
}

#[test]
fn a_separate_debug_file_is_found_in_a_debuginfo_dir_only_if_it_belongs() {
    let Some(program) = build("params-stripped", &["-g", "-Wl,--build-id"]) else {
        return;
    };
    let dir = program.parent().unwrap().join("debug-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let debug = dir.join("params-stripped.debug");
    let run = |args: &[&std::ffi::OsStr]| {
        assert!(Command::new("objcopy")
            .args(args)
            .status()
            .unwrap()
            .success());
    };
    run(&[
        "--only-keep-debug".as_ref(),
        program.as_os_str(),
        debug.as_os_str(),
    ]);
    run(&["--strip-debug".as_ref(), program.as_os_str()]);
    assert!(matches!(
        DebugInfo::open(&program),
        Err(sdt_types::Error::NoDebugInfo { .. })
    ));
    // Relative to the program's directory, as bpftrace takes it.
    let info = DebugInfo::open_with(&program, &[PathBuf::from("debug-dir")]).unwrap();
    assert_eq!(info.debug_file, debug);
    check_params(&info, &program);

    // The debug file of another build (another build-id) is passed over.
    let other = build("params-other", &["-g", "-Wl,--build-id"]).unwrap();
    run(&[
        "--only-keep-debug".as_ref(),
        other.as_os_str(),
        debug.as_os_str(),
    ]);
    let Err(sdt_types::Error::NoDebugInfo { looked, .. }) =
        DebugInfo::open_with(&program, std::slice::from_ref(&dir))
    else {
        panic!("the debug file of another build is not used");
    };
    assert!(
        looked.iter().any(|l| l.contains("of another build")),
        "{looked:?}"
    );
}
