//! Uprobes typed and placed by DWARF: `args` of a function read at its
//! entry where the x86-64 calling convention puts each parameter,
//! `-lv` listing the parameters, `uprobe:FILE@SOURCE:LINE` through the
//! line tables, `--debuginfo` for a stripped file, and libc through
//! Debian's libc6-dbg.
//!
//! The fixture (`tests/fixtures/dwarf/params.c`) calls functions that
//! take every kind of parameter and logs, per call, what it passed, in
//! the words the scripts print; the two are compared. It is built as a
//! PIE and not, whole and with split DWARF, with one function from a file
//! built without `-g`.
//!
//! Listing needs no privilege; running scripts needs root. With
//! `CI=true` a missing privilege or tool fails the tests; elsewhere they
//! print a loud SKIP.

mod list_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use list_common::{assert_no_panic, have, require, sdt};
use sdt_testing::fixture::C;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/dwarf")
}

/// The fixture built with `flags`: `params.c` with them, `nodebug.c`
/// without their `-g` flags, linked with `--build-id`.
fn build(name: &str, flags: &[&str]) -> PathBuf {
    let no_g: Vec<&str> = flags
        .iter()
        .copied()
        .filter(|f| !f.starts_with("-g"))
        .collect();
    let params = C::new("tests/fixtures/dwarf/params.c")
        .flags(&["-O2", "-Wall", "-c"])
        .flags(flags)
        .output("params.o")
        .build();
    let nodebug = C::new("tests/fixtures/dwarf/nodebug.c")
        .flags(&["-O2", "-c"])
        .flags(&no_g)
        .output("nodebug.o")
        .build();
    C::new(params)
        .source(nodebug)
        .flags(&no_g)
        .flags(&["-Wl,--build-id"])
        .output(name)
        .build()
}

struct Builds {
    /// `(variant, program)`.
    all: Vec<(&'static str, PathBuf)>,
}

fn builds() -> Option<Builds> {
    if !require(have("cc"), "a C compiler (cc)") {
        return None;
    }
    Some(Builds {
        all: vec![
            ("no-pie", build("params", &["-g", "-no-pie", "-fno-pie"])),
            ("pie", build("params-pie", &["-g", "-pie", "-fpie"])),
            (
                "split-dwarf",
                build("params-split", &["-g", "-gsplit-dwarf", "-pie", "-fpie"]),
            ),
        ],
    })
}

fn no_pie() -> Option<PathBuf> {
    builds().map(|b| b.all[0].1.clone())
}

/// Runs `sdt run ARGS -e SCRIPT -c 'PROGRAM LOG ROUNDS'`; returns what it
/// printed, the fixture's log, and the log's path.
fn traced(program: &Path, script: &str, rounds: u32, args: &[&str]) -> (String, String, PathBuf) {
    // A log of its own: tests run the same program at the same time.
    static RUNS: AtomicU32 = AtomicU32::new(0);
    let log = program.with_extension(format!("{}.log", RUNS.fetch_add(1, Ordering::Relaxed)));
    let command = format!("{} {} {rounds}", program.display(), log.display());
    let out = sdt()
        .arg("run")
        .args(args)
        .args(["-c", &command, "-e", script])
        .output()
        .expect("run sdt");
    assert_no_panic(&out);
    assert!(
        out.status.success(),
        "sdt run -e {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        std::fs::read_to_string(&log).expect("the fixture's log"),
        log,
    )
}

/// `sdt run -e SCRIPT` that must fail; returns its standard error.
fn refused(script: &str, args: &[&str]) -> String {
    let out = sdt()
        .arg("run")
        .args(args)
        .args(["-e", script])
        .output()
        .expect("run sdt");
    assert_no_panic(&out);
    assert!(!out.status.success(), "{script} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every parameter the calling convention puts in a register or on the
/// stack, printed by name with no cast, in the fixture's own words.
const NAMED: &str = r#"
uprobe:PROGRAM:scalars {
  printf("scalars n=%d c=%c u=%u big=%ld color=%d flag=%d\n", args.n, args.c, args.u, args.big, args.color, args.flag);
}
uprobe:PROGRAM:pointers {
  printf("pointers text=%s id=%d name=%s score1=%d next=%d count=%d\n", str(args.text), args.node->id, args.node->name, args.node->scores[1], args.node.next.id, *args->count);
}
uprobe:PROGRAM:small_structs { printf("small_structs p=%d,%d t=%d,%d,%d after=%d\n", args.p.x, args.p.y, args.t.a, args.t.b, args.t.c, args.after); }
uprobe:PROGRAM:bits {
  printf("bits ready=%u level=%d id=%u at=%d,%d w=%d h=%d", args.f.ready, args.f.level, args.f.id, args.b.at.x, args.b.at.y, args.b.w, args.b.h);
  printf(" s=%d,%d,%d,%d\n", args.s.a, args.s.at.x, args.s.at.y, args.s.b);
}
uprobe:PROGRAM:on_stack { printf("on_stack w=%ld,%ld,%ld after=%d\n", args.w.a, args.w.b, args.w.c, args.after); }
uprobe:PROGRAM:many { printf("many a=%d f=%d g=%d h=%ld\n", args.a, args.f, args.g, args.h); }
uprobe:PROGRAM:floats { printf("floats after=%d last=%d\n", args.after, args.last); }
uprobe:PROGRAM:returns_wide { printf("returns_wide seed=%d step=%ld\n", args.seed, args.step); }
uprobe:PROGRAM:with_mixed { printf("with_mixed after=%d\n", args.after); }
"#;

#[test]
fn args_name_every_parameter_the_calling_convention_passes() {
    let Some(builds) = builds() else { return };
    if !sdt_testing::require_root() {
        return;
    }
    for (variant, program) in &builds.all {
        let script = NAMED.replace("PROGRAM", program.to_str().unwrap());
        let (printed, log, _) = traced(program, &script, 3, &[]);
        let want: Vec<String> = log
            .lines()
            .filter(|l| {
                [
                    "scalars",
                    "pointers",
                    "small_structs",
                    "bits",
                    "on_stack",
                    "many",
                    "floats",
                    "returns_wide",
                ]
                .iter()
                .any(|f| l.starts_with(&format!("{f} ")))
            })
            .map(String::from)
            .chain(log.lines().filter_map(|l| {
                // The struct with a double is only read for `after`.
                let rest = l.strip_prefix("with_mixed ")?;
                Some(format!(
                    "with_mixed {}",
                    rest.split(' ').find(|w| w.starts_with("after="))?
                ))
            }))
            .collect();
        // The fixture's own output (a sum) goes to the same place.
        let mut got: Vec<String> = printed
            .lines()
            .filter(|l| l.contains('='))
            .map(String::from)
            .collect();
        // with_mixed's lines were moved to the end of `want`.
        let (mixed, mut rest): (Vec<String>, Vec<String>) =
            got.drain(..).partition(|l| l.starts_with("with_mixed"));
        rest.extend(mixed);
        assert_eq!(rest, want, "{variant}: {printed}");
        assert_eq!(want.len(), 3 * 9, "{variant}: every call, every round");
    }
}

#[test]
fn args_is_a_struct_to_print_and_keep_in_maps() {
    let Some(program) = no_pie() else { return };
    if !sdt_testing::require_root() {
        return;
    }
    let p = program.to_str().unwrap();
    let script = format!(
        "uprobe:{p}:small_structs {{ print(args); @last = args; @calls[args] = count(); }}\n\
         uprobe:{p}:wide_int {{ print(args); }}"
    );
    let (printed, log, _) = traced(&program, &script, 2, &[]);
    // Structs passed in one and in two registers, put together again.
    for line in log.lines() {
        if let Some(rest) = line.strip_prefix("small_structs ") {
            let value = |key: &str| {
                rest.split(' ')
                    .find_map(|w| w.strip_prefix(key))
                    .unwrap()
                    .split(',')
                    .map(String::from)
                    .collect::<Vec<String>>()
            };
            let (p, t, after) = (value("p="), value("t="), value("after="));
            let want = format!(
                "{{ .p = {{ .x = {}, .y = {} }}, .t = {{ .a = {}, .b = {}, .c = {} }}, .after = {} }}",
                p[0], p[1], t[0], t[1], t[2], after[0]
            );
            assert!(printed.lines().any(|l| l == want), "{want} in {printed}");
            assert!(
                printed.lines().any(|l| l == format!("@calls[{want}]: 1")),
                "a key per call: {printed}"
            );
        }
        // A 128-bit integer in two registers, its bytes in order.
        if let Some(rest) = line.strip_prefix("wide_int ") {
            let number = |key: &str| -> u64 {
                rest.split(' ')
                    .find_map(|w| w.strip_prefix(key))
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            let bytes: Vec<String> = (u128::from(number("low="))
                | (u128::from(number("high=")) << 64))
                .to_le_bytes()
                .iter()
                .map(|b| b.to_string())
                .collect();
            let want = format!(
                "{{ .v = [{}], .after = {} }}",
                bytes.join(","),
                number("after=")
            );
            assert!(printed.lines().any(|l| l == want), "{want} in {printed}");
        }
    }
    let last = log
        .lines()
        .rfind(|l| l.starts_with("small_structs "))
        .unwrap();
    let x = last
        .split(' ')
        .find_map(|w| w.strip_prefix("p="))
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with(&format!("@last: {{ .p = {{ .x = {x},"))),
        "@last holds the last call: {printed}"
    );
}

#[test]
fn what_cannot_be_read_is_refused_where_the_script_names_it() {
    let Some(program) = no_pie() else { return };
    if !sdt_testing::require_root() {
        return;
    }
    let p = program.to_str().unwrap();
    let check = |script: String, wanted: &[&str]| {
        let err = refused(&script, &[]);
        for w in wanted {
            assert!(err.contains(w), "{w:?} in {err}");
        }
        assert!(err.contains("1:"), "located: {err}");
    };
    // In an SSE register, whole or in part.
    check(
        format!("uprobe:{p}:floats {{ print(args.d); }}"),
        &["`d`", "%xmm0", "uprobes do not save"],
    );
    check(
        format!("uprobe:{p}:with_mixed {{ print(args.m); }}"),
        &["`m`", "part of it", "%xmm0"],
    );
    check(
        format!("uprobe:{p}:floats {{ print(args); }}"),
        &["`d`", "%xmm0"],
    );
    check(
        format!("uretprobe:{p}:scalars {{ print(args.n); }}"),
        &["not available in uretprobes", "map keyed by tid"],
    );
    check(
        format!("uprobe:{p}:without_debug_info {{ print(args.x); }}"),
        &["does not describe without_debug_info", "without -g"],
    );
    check(
        format!("uprobe:{p}:scalars {{ print(args.colour); }}"),
        &["no parameter `colour`", "`color`"],
    );
    // Functions that differ in their parameters.
    check(
        format!("uprobe:{p}:s*s {{ print(args.n); }}"),
        &["`args` differs", "scalars", "small_structs"],
    );
    // Past the entry, the registers hold other things.
    let second = second_instruction(&program, "scalars");
    check(
        format!("uprobe:{p}:scalars+{second} {{ print(args.n); }}"),
        &[&format!("{second} bytes into it"), "first instruction"],
    );
}

/// The offset of the second instruction of `function`, from objdump.
fn second_instruction(program: &Path, function: &str) -> u64 {
    let out = Command::new("objdump")
        .arg("-d")
        .arg(format!("--disassemble={function}"))
        .arg(program)
        .output()
        .expect("run objdump");
    let text = String::from_utf8_lossy(&out.stdout);
    let addresses: Vec<u64> = text
        .lines()
        .filter_map(|l| {
            let (address, rest) = l.trim().split_once(":\t")?;
            (!rest.is_empty()).then(|| u64::from_str_radix(address, 16).ok())?
        })
        .collect();
    addresses[1] - addresses[0]
}

#[test]
fn listing_shows_the_parameters_as_bpftrace_does() {
    let Some(builds) = builds() else { return };
    for (variant, program) in &builds.all {
        let p = program.to_str().unwrap();
        let out = sdt()
            .args(["run", "-lv", &format!("uprobe:{p}:*")])
            .output()
            .unwrap();
        assert_no_panic(&out);
        let text = String::from_utf8_lossy(&out.stdout);
        for block in [
            format!("uprobe:{p}:main\n    int argc\n    char** argv\n"),
            format!("uprobe:{p}:pointers\n    const char* text\n    struct node* node\n    int* count\n"),
            format!("uprobe:{p}:small_structs\n    struct point p\n    struct triple t\n    int after\n"),
        ] {
            assert!(text.contains(&block), "{variant}: {block} in {text}");
        }
        // No DWARF: the function alone.
        let mut lines = text.lines();
        lines
            .find(|l| *l == format!("uprobe:{p}:without_debug_info"))
            .expect("listed");
        assert!(
            lines.next().is_none_or(|l| !l.starts_with(' ')),
            "{variant}: {text}"
        );
        // With a program: its uprobes at entries with their parameters,
        // its uretprobes without.
        let out = sdt()
            .args(["run", "-lv", "-e"])
            .arg(format!("uprobe:{p}:bits {{}} uretprobe:{p}:bits {{}}"))
            .output()
            .unwrap();
        assert_no_panic(&out);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!(
                "uprobe:{p}:bits\n    struct flags f\n    struct box b\n    struct straddle s\n\
                 uretprobe:{p}:bits\n"
            ),
            "{variant}"
        );
        // Without -v, names only.
        let out = sdt()
            .args(["run", "-l", &format!("uprobe:{p}:main")])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("uprobe:{p}:main\n")
        );
    }
}

/// The line of the fixture whose text contains `marker`.
fn line_of(marker: &str) -> u64 {
    let source = std::fs::read_to_string(fixture_dir().join("params.c")).unwrap();
    source.lines().position(|l| l.contains(marker)).unwrap() as u64 + 1
}

#[test]
fn a_probe_on_a_source_line_fires_at_its_code() {
    let Some(builds) = builds() else { return };
    if !sdt_testing::require_root() || !require(have("addr2line"), "addr2line (binutils)") {
        return;
    }
    let line = line_of("sum += on_stack(");
    for (variant, program) in &builds.all {
        let p = program.to_str().unwrap();
        let script = format!(
            "uprobe:{p}@params.c:{line} {{ @hits = count(); @ip[reg(\"ip\") - uaddr(\"main\") + {main:#x}] = count(); }}",
            main = symbol(program, "main")
        );
        let (printed, _, _) = traced(program, &script, 4, &[]);
        assert!(
            printed.lines().any(|l| l == "@hits: 4"),
            "{variant}: once per round: {printed}"
        );
        // The address, back in the file's terms, is the line's code.
        let address = printed
            .lines()
            .find_map(|l| {
                l.strip_prefix("@ip[")?
                    .split(']')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("{variant}: {printed}"));
        if *variant != "split-dwarf" {
            let out = Command::new("addr2line")
                .arg("-e")
                .arg(program)
                .arg(format!("{address:#x}"))
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains(&format!("params.c:{line}")),
                "{variant}: {address:#x} is {text}"
            );
        }
    }
    let p = no_pie().unwrap();
    let p = p.to_str().unwrap();
    // A line with no code names the nearest lines that have some.
    let comment = line_of("no code on the next line") + 1;
    let err = refused(&format!("uprobe:{p}@params.c:{comment} {{ exit(); }}"), &[]);
    assert!(
        err.contains(&format!("line {comment} of")) && err.contains("has no code"),
        "{err}"
    );
    let err = refused(&format!("uprobe:{p}@param.c:{line} {{ exit(); }}"), &[]);
    assert!(
        err.contains("no source file `param.c`") && err.contains("params.c"),
        "{err}"
    );
}

/// The address of `name` in the file's symbol table.
fn symbol(program: &Path, name: &str) -> u64 {
    let out = Command::new("nm").arg(program).output().expect("run nm");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            let (address, _, n) = (w.next()?, w.next()?, w.next()?);
            (n == name).then(|| u64::from_str_radix(address, 16).ok())?
        })
        .unwrap_or_else(|| panic!("{name} in {}", program.display()))
}

#[test]
fn debuginfo_finds_the_debug_file_of_a_stripped_program() {
    let Some(program) = no_pie() else { return };
    if !sdt_testing::require_root() || !require(have("objcopy"), "objcopy") {
        return;
    }
    let dir = program.parent().unwrap().join("stripped");
    let debug_dir = dir.join("debug");
    std::fs::create_dir_all(&debug_dir).unwrap();
    let stripped = dir.join("params");
    let objcopy = |args: &[&Path]| {
        assert!(Command::new("objcopy")
            .args(args)
            .status()
            .unwrap()
            .success());
    };
    objcopy(&[
        Path::new("--only-keep-debug"),
        &program,
        &debug_dir.join("params.debug"),
    ]);
    objcopy(&[Path::new("--strip-debug"), &program, &stripped]);
    let s = stripped.to_str().unwrap();
    let script = format!("uprobe:{s}:many {{ printf(\"many a=%d h=%ld\\n\", args.a, args.h); }}");
    let err = refused(&script, &[]);
    assert!(
        err.contains("needs the debug information") && err.contains("/usr/lib/debug"),
        "{err}"
    );
    // Relative to the program's directory, as bpftrace takes it.
    let (printed, log, _) = traced(&stripped, &script, 2, &["--debuginfo", "debug"]);
    let want: Vec<String> = log
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("many ")?;
            let word = |k: &str| rest.split(' ').find(|w| w.starts_with(k)).map(String::from);
            Some(format!("many {} {}", word("a=")?, word("h=")?))
        })
        .collect();
    let got: Vec<&str> = printed.lines().filter(|l| l.starts_with("many")).collect();
    assert_eq!(got, want);
    // And for listing, and source lines.
    let out = sdt()
        .args(["run", "-lv", "--debuginfo", debug_dir.to_str().unwrap()])
        .arg(format!("uprobe:{s}:main"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("    int argc\n"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn libc_parameters_from_libc6_dbg() {
    let Some(program) = no_pie() else { return };
    if !sdt_testing::require_root()
        || !require(
            Path::new("/usr/lib/debug/.build-id").is_dir(),
            "libc6-dbg (debug files by build-id)",
        )
    {
        return;
    }
    // libc itself is stripped; its parameters come from the debug file
    // that Debian's libc6-dbg installs by build-id. The fixture opens its
    // log, then reads its rounds with atoi(), which is strtol(s, NULL, 10).
    // The log's path is as long as the checkout's: strings of up to 1024
    // bytes.
    let script = "config = { max_strlen = 1024 }\n\
                  uprobe:libc:fopen /pid == cpid/ { printf(\"fopen %s\\n\", str(args.filename)); }\n\
                  uprobe:libc:strtol /pid == cpid/ { printf(\"strtol %s %d %d\\n\", str(args.nptr), args.endptr, args.base); }";
    let (printed, _, log) = traced(&program, script, 7, &[]);
    let got: Vec<&str> = printed
        .lines()
        .filter(|l| l.starts_with("fopen ") || l.starts_with("strtol "))
        .collect();
    assert_eq!(
        got,
        [format!("fopen {}", log.display()), "strtol 7 0 10".into()],
        "{printed}"
    );
    let out = sdt()
        .args(["run", "-lv", "uprobe:libc:fopen"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .ends_with(":fopen\n    const char* filename\n    const char* mode\n"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
