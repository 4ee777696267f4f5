//! sdt installed as `bpftrace`: the command line, configuration, named
//! parameters, messages, listings and attach points of bpftrace 0.24 to
//! 0.26, checked on sdt alone. Debian's bpftrace 0.17 has none of these;
//! what it has is compared with it in `run_vs_bpftrace.rs`.
//!
//! Each test runs sdt through a symlink named `bpftrace`, in a directory
//! of its own that holds a copy of `tests/fixtures/cli/ticker.c` built as
//! `ticker` (one USDT probe with two sites, a function `work`, a
//! `getppid()` per round) and a second copy, `ticker_b`.
//!
//! Tests that attach probes need root (or CAP_BPF, CAP_PERFMON and
//! CAP_SYS_ADMIN); the others run anywhere. With `CI=true` a missing
//! privilege or tool fails the test; elsewhere it prints a loud SKIP.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use sdt_testing::fixture::C;
use sdt_testing::{have, require, require_root};

const NOTIFY: &str = "__BPFTRACE_NOTIFY_PROBES_ATTACHED";

/// The built fixture and the `bpftrace` symlink, made once.
struct Built {
    ticker: PathBuf,
    bin: PathBuf,
}

fn built() -> Option<&'static Built> {
    static BUILT: OnceLock<Option<Built>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if !require(have("cc"), "a C compiler (cc)") {
                return None;
            }
            let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bpftrace-cli");
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("bin")).unwrap();
            let ticker = C::new("tests/fixtures/cli/ticker.c")
                .flags(&["-O2", "-g"])
                .dir(&root)
                .try_build();
            if !require(
                ticker.is_ok(),
                "<sys/sdt.h> (Debian: systemtap-sdt-dev) for the fixture",
            ) {
                eprintln!("{}", ticker.unwrap_err());
                return None;
            }
            let ticker = ticker.ok()?;
            let bin = root.join("bin");
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sdt"), bin.join("bpftrace")).unwrap();
            Some(Built { ticker, bin })
        })
        .as_ref()
}

/// A directory of one test, with `ticker` and `ticker_b` in it.
struct Case {
    dir: PathBuf,
    bin: PathBuf,
}

impl Case {
    fn new(name: &str) -> Option<Case> {
        let built = built()?;
        let dir = built.bin.parent().unwrap().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for copy in ["ticker", "ticker_b"] {
            std::fs::copy(&built.ticker, dir.join(copy)).unwrap();
        }
        Some(Case {
            dir,
            bin: built.bin.clone(),
        })
    }

    /// Like `new`, for a test that attaches probes.
    fn root(name: &str) -> Option<Case> {
        if !require_root() {
            return None;
        }
        Case::new(name)
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("timeout");
        c.args(["-k", "5", "60", program])
            .current_dir(&self.dir)
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env_remove(NOTIFY);
        for (name, _) in std::env::vars() {
            if name.starts_with("BPFTRACE_") {
                c.env_remove(name);
            }
        }
        c
    }

    /// `bpftrace ARGS` with `env` set.
    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.command("bpftrace");
        c.args(args).envs(env.iter().copied());
        let out = c.output().expect("run bpftrace (sdt)");
        assert!(
            !text(&out.stderr).contains("panicked"),
            "{}",
            text(&out.stderr)
        );
        out
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_env(args, &[])
    }

    /// `sdt SUBCOMMAND ARGS`.
    fn sdt(&self, args: &[&str]) -> Output {
        self.command(env!("CARGO_BIN_EXE_sdt"))
            .args(args)
            .output()
            .expect("run sdt")
    }

    fn write(&self, name: &str, text: &str) -> String {
        std::fs::write(self.dir.join(name), text).unwrap();
        name.to_string()
    }

    /// Starts `./ticker ARGS` in the case's directory.
    fn ticker(&self, args: &[&str]) -> Running {
        Running(
            Command::new(self.dir.join("ticker"))
                .args(args)
                .current_dir(&self.dir)
                .stdout(Stdio::null())
                .spawn()
                .expect("start ticker"),
        )
    }
}

/// A process this test started, killed (by its PID) when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn lines(bytes: &[u8]) -> Vec<String> {
    text(bytes).lines().map(str::to_string).collect()
}

fn assert_status(out: &Output, code: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: status\n--- stdout:\n{}--- stderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

// ------------------------------------------------- without privileges

/// `-h` prints the usage (a `USAGE:` line) on standard output; a bad
/// option, or a named parameter before `--`, prints an error and the
/// usage on standard error and fails with 1; `-p`, the program file and
/// `-f` are checked with bpftrace's words, `-p` before the file is read.
#[test]
fn usage_and_errors_of_the_command_line() {
    let Some(case) = Case::new("usage") else {
        return;
    };
    let help = case.run(&["-h"]);
    assert_status(&help, 0, "-h");
    assert!(
        lines(&help.stdout).iter().any(|l| l == "USAGE:"),
        "{}",
        text(&help.stdout)
    );
    assert!(text(&help.stdout).contains("--verify-llvm-ir"));
    for args in [
        &["-idonotexist"][..],
        &["-e", "BEGIN { }", "--aa=20"],
        &["--mode", "bench", "-e", "BEGIN { }"],
        &[],
    ] {
        let out = case.run(args);
        assert_status(&out, 1, &format!("{args:?}"));
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
        let stderr = lines(&out.stderr);
        assert!(stderr[0].starts_with("ERROR: "), "{args:?}: {stderr:?}");
        assert!(stderr.iter().any(|l| l == "USAGE:"), "{args:?}: {stderr:?}");
    }
    let first_line = |args: &[&str]| {
        let out = case.run(args);
        assert_status(&out, 1, &format!("{args:?}"));
        lines(&out.stderr).first().cloned().unwrap_or_default()
    };
    assert_eq!(
        first_line(&["-p", "a1111", "none.bt"]),
        "ERROR: Failed to parse pid: invalid integer: a1111"
    );
    assert_eq!(
        first_line(&["-p", "111a1", "none.bt"]),
        "ERROR: Failed to parse pid: invalid trailing bytes: 111a1"
    );
    assert_eq!(
        first_line(&["-p", "5000000", "none.bt"]),
        "ERROR: Pid out of range: 5000000"
    );
    assert_eq!(
        first_line(&["none.bt"]),
        "ERROR: failed to open file 'none.bt': No such file or directory"
    );
    assert_eq!(
        first_line(&["-f", "jsonx", "-e", "BEGIN { }"]),
        "ERROR: Invalid output format \"jsonx\""
    );
    // Under its own name sdt speaks as itself.
    let out = case.sdt(&["run", "-p", "a1", "x.bt"]);
    assert_status(&out, 2, "sdt run -p a1");
    assert_eq!(
        lines(&out.stderr)[0],
        "sdt: Failed to parse pid: invalid integer: a1"
    );
}

/// An error in a script starts with bpftrace's line, then sdt's located
/// form without its header; under `sdt run`, sdt's form alone.
#[test]
fn errors_in_a_script_start_with_bpftrace_s_line() {
    let Some(case) = Case::new("script-errors") else {
        return;
    };
    let program = "config = { bad_config=raw } begin {}";
    let out = case.run(&["-e", program]);
    assert_status(&out, 1, "a bad config option");
    let stderr = lines(&out.stderr);
    assert_eq!(
        stderr[0],
        "stdin:1:12-26: ERROR: bad_config: not a known configuration option"
    );
    assert!(stderr[1].contains("stdin:1:12"), "{stderr:?}");
    assert!(
        stderr.iter().any(|l| l.contains("^^^^^^^^^^^^^^")),
        "{stderr:?}"
    );
    assert!(
        !stderr.iter().any(|l| l.starts_with("error:")),
        "{stderr:?}"
    );
    let file = case.write("bad.bt", "BEGIN {\n  @x = 1 +\n}\n");
    let out = case.run(&[&file]);
    assert_status(&out, 1, "a syntax error");
    assert!(
        lines(&out.stderr)[0].starts_with("bad.bt:3:1-2: ERROR: "),
        "{}",
        text(&out.stderr)
    );
    let out = case.sdt(&["run", "-e", program]);
    assert_status(&out, 1, "sdt run");
    assert!(
        lines(&out.stderr)[0].starts_with("error: bad_config: not a known configuration option"),
        "{}",
        text(&out.stderr)
    );
    // A header that cannot be found is an error at its line.
    let out = case.run(&["-e", "#include <lol/no.h>\nbegin { }"]);
    assert_status(&out, 1, "a missing header");
    assert_eq!(
        lines(&out.stderr)[0],
        "stdin:1:1-20: ERROR: 'lol/no.h' file not found"
    );
    let out = case.run(&["--include", "nothere.h", "-e", "begin { }"]);
    assert_status(&out, 1, "a missing --include");
    assert_eq!(
        lines(&out.stderr)[0],
        "ERROR: --include nothere.h: file not found"
    );
}

/// Named parameters are checked against the program's getopt() calls
/// before anything else: `--help` lists them, an unknown one or a value
/// of the wrong type is refused with bpftrace's words.
#[test]
fn named_parameters_are_checked_against_the_program() {
    let Some(case) = Case::new("getopt-errors") else {
        return;
    };
    let program = r#"begin { print((getopt("aa", 10, "Description of aa"), getopt("bb", 1), getopt("cc"))); }"#;
    let out = case.run(&["-e", program, "--", "--help"]);
    assert_status(&out, 1, "-- --help");
    assert_eq!(
        lines(&out.stderr),
        [
            "HINT: expected program options:",
            "--aa: Description of aa",
            "--bb",
            "--cc"
        ]
    );
    let out = case.run(&["-e", program, "--", "--dd", "--aa=3"]);
    assert_status(&out, 1, "an unknown parameter");
    assert_eq!(
        lines(&out.stderr),
        [
            "ERROR: unexpected program command line options: --dd",
            "HINT: expected program options: --aa, --bb, --cc"
        ]
    );
    let out = case.run(&["-e", program, "--", "--aa=False"]);
    assert_status(&out, 1, "a value of the wrong type");
    assert_eq!(
        lines(&out.stderr),
        ["ERROR: program command line option --aa invalid integer (value: False)"]
    );
}

/// `--info` reports, in bpftrace's shape, what the kernel and sdt do.
#[test]
fn info_reports_what_sdt_supports() {
    let Some(case) = Case::new("info") else {
        return;
    };
    let out = case.run(&["--info"]);
    assert_status(&out, 0, "--info");
    let stdout = text(&out.stdout);
    for line in [
        "Build\n",
        "  kprobe: no\n",
        "  kprobe_multi: no\n",
        "  perf_event: yes\n",
        "  libdw (DWARF support): yes",
        "Probe types\n",
    ] {
        assert!(stdout.contains(line), "{line:?} in:\n{stdout}");
    }
    assert!(
        stdout.contains("  uprobe_multi: yes\n") || stdout.contains("  uprobe_multi: no\n"),
        "{stdout}"
    );
    // The kernel's BTF is used where the kernel has it.
    let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
    let line = format!("  btf: {}\n", if btf { "yes" } else { "no" });
    assert!(stdout.contains(&line), "{line:?} in:\n{stdout}");
}

// ------------------------------------------------------ with privileges

/// With `__BPFTRACE_NOTIFY_PROBES_ATTACHED` set, that word is a line of
/// standard output once every probe is attached: before BEGIN's output,
/// and on standard output also with `-o`. Also `--verify-llvm-ir`.
#[test]
fn the_attach_notification() {
    let Some(case) = Case::root("notify") else {
        return;
    };
    let program = "BEGIN { printf(\"begin\\n\"); } interval:ms:50 { exit(); }";
    let out = case.run_env(&["--verify-llvm-ir", "-e", program], &[(NOTIFY, "1")]);
    assert_status(&out, 0, "notify");
    let stdout = lines(&out.stdout);
    // As bpftrace: BEGIN's output comes once the probes are attached.
    assert_eq!(
        stdout[..3],
        ["Attaching 2 probes...", NOTIFY, "begin"],
        "{stdout:?}"
    );
    let out = case.run_env(&["-o", "out.txt", "-e", program], &[(NOTIFY, "1")]);
    assert_status(&out, 0, "notify with -o");
    assert_eq!(lines(&out.stdout)[0], NOTIFY);
    let file = std::fs::read_to_string(case.dir.join("out.txt")).unwrap();
    assert!(!file.contains(NOTIFY) && file.contains("begin"), "{file}");
    let out = case.run(&["-e", program]);
    assert!(!text(&out.stdout).contains(NOTIFY), "only when asked");
}

/// Wrappers of both eras find their line: bpftrace up to 0.23 prints
/// `Attaching N probes...` on the output before it attaches, 0.24 and
/// later `Attached N probes` on standard error once it has attached.
/// sdt prints both (JSON has its one record; `-q` neither).
#[test]
fn the_attach_lines_of_both_eras() {
    let Some(case) = Case::root("attach_lines") else {
        return;
    };
    let program = "BEGIN { printf(\"begin\\n\"); } interval:ms:50 { exit(); }";
    // Both streams into one file, as a wrapper that merges them reads it.
    let merged = case.dir.join("merged.txt");
    let file = std::fs::File::create(&merged).unwrap();
    let status = case
        .command("bpftrace")
        .args(["-e", program])
        .env(NOTIFY, "1")
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .unwrap();
    assert!(status.success());
    let both = std::fs::read_to_string(&merged).unwrap();
    let got: Vec<&str> = both.lines().take(4).collect();
    assert_eq!(
        got,
        [
            "Attaching 2 probes...",
            "Attached 2 probes",
            NOTIFY,
            "begin"
        ],
        "{both}"
    );

    let out = case.run(&["-e", program]);
    assert_eq!(lines(&out.stdout)[0], "Attaching 2 probes...");
    assert_eq!(lines(&out.stderr), ["Attached 2 probes"]);
    let one = "BEGIN { exit(); }";
    let out = case.run(&["-e", one]);
    assert_eq!(lines(&out.stdout)[0], "Attaching 1 probe...");
    assert_eq!(lines(&out.stderr), ["Attached 1 probe"]);

    // With -o, 0.23's line goes to the file, 0.24's to standard error.
    let out = case.run(&["-o", "out.txt", "-e", program]);
    assert_eq!(lines(&out.stderr), ["Attached 2 probes"]);
    let file = std::fs::read_to_string(case.dir.join("out.txt")).unwrap();
    assert!(file.starts_with("Attaching 2 probes...\nbegin\n"), "{file}");

    let out = case.run(&["-q", "-e", program]);
    assert_eq!(lines(&out.stdout)[0], "begin");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));

    // JSON: one record, with the count both eras give it; nothing else.
    let out = case.run(&["-f", "json", "-e", program]);
    assert_eq!(
        lines(&out.stdout)[0],
        r#"{"type": "attached_probes", "count": 2, "data": {"probes": 2}}"#
    );
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

/// `getopt()` is the named parameter's value, or its default, with the
/// default's type; positional parameters keep their numbers around them;
/// options may follow the program file; of several `-e`, the last counts.
#[test]
fn named_and_positional_parameters() {
    let Some(case) = Case::root("getopt") else {
        return;
    };
    let program = r#"BEGIN { print(($1, getopt("aa", 10), getopt("bb", -1), $2, getopt("cc", "hello"), getopt("dd"))); exit(); }"#;
    let out = case.run(&[
        "-e", program, "pos1", "--", "--aa=20", "--bb=-5", "--cc=bye", "pos2", "--dd",
    ]);
    assert_status(&out, 0, "named parameters");
    assert!(
        lines(&out.stdout).contains(&"(pos1, 20, -5, pos2, bye, true)".to_string()),
        "{}",
        text(&out.stdout)
    );
    let out = case.run(&["-e", program, "x", "y"]);
    assert!(
        lines(&out.stdout).contains(&"(x, 10, -1, y, hello, false)".to_string()),
        "{}",
        text(&out.stdout)
    );
    let script = case.write(
        "params.bt",
        "BEGIN { printf(\"%d %s\\n\", $1 + 1, str($2)); exit(); }",
    );
    let out = case.run(&[&script, "-q", "--", "-5", "word"]);
    assert_eq!(
        text(&out.stdout).lines().next(),
        Some("-4 word"),
        "{}",
        text(&out.stderr)
    );
    let out = case.run(&[
        "-e",
        "BEGIN { printf(\"first\\n\"); exit(); }",
        "-e",
        "BEGIN { printf(\"second\\n\"); exit(); }",
    ]);
    assert!(text(&out.stdout).contains("second") && !text(&out.stdout).contains("first"));
    let out = case.run(&["-e", "$1 { printf(\"whole\\n\"); exit(); }", "i:ms:1"]);
    assert_status(&out, 0, "$1 as the attach point");
    assert!(text(&out.stdout).contains("whole"));
}

/// Config options and variables that change what sdt does; renamed ones
/// warn; the environment wins.
#[test]
fn configuration() {
    let Some(case) = Case::root("config") else {
        return;
    };
    let out = case.run(&[
        "-e",
        "config = { print_maps_on_exit = 0 } BEGIN { @test = 1; @m[1] = 2; exit(); }",
    ]);
    assert_status(&out, 0, "print_maps_on_exit");
    assert!(
        !text(&out.stdout).contains("@test"),
        "{}",
        text(&out.stdout)
    );
    case.write("file.txt", "0123456789");
    let cat = "config = { max_cat_bytes = 5 } BEGIN { cat(\"file.txt\"); exit(); }";
    let out = case.run(&["-q", "-e", cat]);
    assert_eq!(text(&out.stdout).trim_end(), "01234");
    let out = case.run_env(&["-q", "-e", cat], &[("BPFTRACE_MAX_CAT_BYTES", "2")]);
    assert_eq!(text(&out.stdout).trim_end(), "01", "the environment wins");
    let out = case.run_env(
        &["-e", "BEGIN { @[1] = 1; @[2] = 2; @[3] = 3; exit(); }"],
        &[("BPFTRACE_MAX_MAP_KEYS", "2")],
    );
    assert!(
        text(&out.stderr).contains("dropped because it was full"),
        "{}",
        text(&out.stderr)
    );
    let out = case.run(&[
        "-e",
        "config = { strlen = 40; BPFTRACE_STACK_MODE = raw } BEGIN { exit(); }",
    ]);
    assert_status(&out, 0, "renamed option");
    assert!(
        text(&out.stderr).contains(": WARNING: strlen has been renamed, please use max_strlen"),
        "{}",
        text(&out.stderr)
    );
    let out = case.run_env(
        &["-e", "BEGIN { exit(); }"],
        &[("BPFTRACE_PRINT_MAPS_ON_EXIT", "maybe")],
    );
    assert_status(&out, 1, "a bad variable");
    assert!(text(&out.stderr).starts_with("ERROR: BPFTRACE_PRINT_MAPS_ON_EXIT"));
}

/// An attach point that matches nothing: an error by default (also one of
/// several), left out with a located warning under `missing_probes =
/// warn`, silently under `ignore`; an error when nothing at all matches.
#[test]
fn attach_points_that_match_nothing() {
    let Some(case) = Case::root("missing") else {
        return;
    };
    let body = "uprobe:./ticker:work,uprobe:./ticker:nosuch { @calls = count(); }";
    let out = case.run(&["-e", body, "-c", "./ticker 3"]);
    assert_status(&out, 1, "missing");
    assert!(
        lines(&out.stderr)[0].ends_with(": ERROR: No matches for uprobe ./ticker:nosuch."),
        "{}",
        text(&out.stderr)
    );
    let warn = format!("config = {{ missing_probes = \"warn\" }} {body}");
    let out = case.run(&["-e", &warn, "-c", "./ticker 3"]);
    assert_status(&out, 0, "warn");
    assert!(text(&out.stdout).contains("Attaching 1 probe...\n"));
    assert!(
        text(&out.stdout).contains("@calls: 3"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains(" WARNING: No matches for uprobe ./ticker:nosuch. Skipping."),
        "{}",
        text(&out.stderr)
    );
    let ignore = format!("config = {{ missing_probes = \"ignore\" }} {body}");
    let out = case.run(&["-e", &ignore, "-c", "./ticker 3"]);
    assert_status(&out, 0, "ignore");
    assert!(
        !text(&out.stderr).contains("No matches"),
        "{}",
        text(&out.stderr)
    );
    let out = case.run(&[
        "-e",
        "config = { missing_probes = \"warn\" } tracepoint:syscalls:nonsense { }",
    ]);
    assert_status(&out, 1, "nothing matches");
    assert!(text(&out.stderr).contains("ERROR: No matches for tracepoint syscalls:nonsense."));
}

/// Uprobe places sdt cannot check, refused with bpftrace's words: a
/// symbol without a size (unless --unsafe), an offset past a function's
/// end, an address in no function.
#[test]
fn uprobe_places_that_cannot_be_checked() {
    let Some(case) = Case::root("places") else {
        return;
    };
    let out = case.run(&["-e", "uprobe:./ticker:_init { }"]);
    assert_status(&out, 1, "_init");
    assert!(
        text(&out.stderr)
            .contains("ERROR: Could not determine boundary for _init (symbol has size 0)."),
        "{}",
        text(&out.stderr)
    );
    let out = case.run(&["--unsafe", "--dry-run", "-e", "uprobe:./ticker:_init { }"]);
    assert_status(&out, 0, "_init with --unsafe");
    let out = case.run(&["-e", "uprobe:./ticker:work+1000 { }"]);
    assert!(
        lines(&out.stderr)[0] == "ERROR: Offset outside the function bounds ('work' size is 4)",
        "{}",
        text(&out.stderr)
    );
    let out = case.run(&["-e", "uprobe:./ticker:10 { }"]);
    assert!(
        lines(&out.stderr)[0] == "ERROR: Could not resolve address: ./ticker:0xa",
        "{}",
        text(&out.stderr)
    );
}

/// bpftrace's stack modes: `raw` (addresses alone), `build_id` (the
/// object's build id and the file offset, as `readelf` and `nm` give them),
/// `perf`; bare `ustack` takes `stack_mode` from the config block, and
/// `BPFTRACE_STACK_MODE` in the environment wins over it.
#[test]
fn stack_modes_from_the_call_the_config_and_the_environment() {
    let Some(case) = Case::root("stack_modes") else {
        return;
    };
    let program = "uprobe:./ticker:work { printf(\"[%s][%s][%s]\\n\", ustack(raw, 1), ustack(build_id, 1), ustack(perf, 1)); @[ustack(raw, 1)] = count(); }";
    let out = case.run(&["-c", "./ticker 1", "-e", program]);
    assert_status(&out, 0, "modes");
    let stdout = text(&out.stdout);
    // `work`'s build id and file offset, from binutils.
    let readelf = Command::new("readelf")
        .args(["-nW", "ticker"])
        .current_dir(&case.dir)
        .output()
        .unwrap();
    let build_id = text(&readelf.stdout)
        .lines()
        .find_map(|l| l.split("Build ID: ").nth(1).map(|id| id.trim().to_string()))
        .expect("a build id");
    let file_offset = file_offset_of(&case.dir.join("ticker"), "work");
    // Each stack is a line of its own between `\n`s: `[\nA\n][\nB\n][\nC\n]`.
    let start = stdout.find("[\n").unwrap_or_else(|| panic!("{stdout}"));
    let end = stdout[start..]
        .find("\n]\n")
        .unwrap_or_else(|| panic!("{stdout}"))
        + start;
    let parts: Vec<&str> = stdout[start + 2..end].split("\n][\n").collect();
    let raw = u64::from_str_radix(parts[0], 16).unwrap_or_else(|_| panic!("{stdout}"));
    assert_eq!(
        parts[1],
        format!("{build_id} {file_offset:#04x}"),
        "{stdout}"
    );
    assert_eq!(
        parts[2],
        format!("\t{raw:x} work+0 ({})", case.dir.join("ticker").display())
    );
    assert!(
        stdout.contains(&format!("\n@[\n{raw:x}\n]: 1\n")),
        "{stdout}"
    );

    let bare = "config = { stack_mode = perf } uprobe:./ticker:work { printf(\"%s\", ustack(1)); }";
    // (The address changes from run to run: the fixture is a PIE.)
    let hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
    let out = case.run(&["-c", "./ticker 1", "-e", bare]);
    let perf = lines(&out.stdout);
    assert!(
        perf.iter().any(|l| l
            .strip_prefix('\t')
            .and_then(|l| l.split_once(" work+0 ("))
            .is_some_and(|(a, _)| hex(a))),
        "{perf:?}"
    );
    let out = case.run_env(
        &["-c", "./ticker 1", "-e", bare],
        &[("BPFTRACE_STACK_MODE", "raw")],
    );
    let raw_lines = lines(&out.stdout);
    assert!(raw_lines.iter().any(|l| hex(l)), "{raw_lines:?}");
    let out = case.run_env(
        &["-e", "BEGIN { exit(); }"],
        &[("BPFTRACE_STACK_MODE", "fast")],
    );
    assert_status(&out, 1, "a bad mode");
    assert!(
        text(&out.stderr).contains(
            "Invalid value for stack_mode: valid values are bpftrace, raw, perf, and build_id."
        ),
        "{}",
        text(&out.stderr)
    );
}

/// Code that is not in a program file of its own (bpftrace 0.26): a
/// library stored in a ZIP archive, `uprobe:"archive.zip!/lib.so":fn`, at
/// the member's offset in the archive plus the function's in the member;
/// and, with `--unsafe`, raw code, where the address is the file offset,
/// with bpftrace's warning. `jump` runs each the way a loader would.
#[test]
fn uprobes_in_zip_archives_and_flat_code() {
    let Some(case) = Case::root("archives") else {
        return;
    };
    if !require(have("zip"), "zip") || !require(have("python3"), "python3") {
        return;
    }
    let jump = C::new("tests/fixtures/cli/jump.c").dir(&case.dir).build();
    let library = C::new("tests/fixtures/cli/answer.c")
        .flags(&["-O2", "-fPIC", "-shared", "-nostdlib"])
        .output("libanswer.so")
        .dir(&case.dir)
        .build();
    let shell = |command: &str| {
        let out = Command::new("sh")
            .args(["-c", command])
            .current_dir(&case.dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{command}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    shell("rm -f app.zip && zip -q -0 app.zip libanswer.so");
    // Where the member's bytes start in the archive, as Python reads it.
    let member: u64 = shell(
        "python3 -c \"import struct, zipfile; i = zipfile.ZipFile('app.zip').getinfo('libanswer.so'); \
         d = open('app.zip', 'rb').read(); h = i.header_offset; n, e = struct.unpack('<HH', d[h + 26:h + 30]); \
         print(h + 30 + n + e)\"",
    )
    .trim()
    .parse()
    .unwrap();
    let answer = file_offset_of(&library, "answer");
    let traced = |args: &[&str], file: &str, offset: u64| {
        let mut tracer = case
            .command("bpftrace")
            .args(args)
            .env(NOTIFY, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(tracer.stdout.take().unwrap());
        let mut line = String::new();
        while line.trim_end() != NOTIFY {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "no notification");
        }
        let ran = shell(&format!("{} {file} {offset}", jump.display()));
        assert_eq!(ran, "42\n");
        let out = tracer.wait_with_output().unwrap();
        let mut printed = String::new();
        stdout.read_to_string(&mut printed).unwrap();
        (printed, text(&out.stderr))
    };
    let (printed, stderr) = traced(
        &[
            "-e",
            "uprobe:\"./app.zip!/libanswer.so\":answer { printf(\"%s\\n\", probe); exit(); }",
        ],
        "app.zip",
        member + answer,
    );
    assert_eq!(
        printed.trim(),
        "uprobe:./app.zip!/libanswer.so:answer",
        "{stderr}"
    );
    let out = case.run(&["-e", "uprobe:\"./app.zip!/libnope.so\":answer { }"]);
    assert_status(&out, 1, "no such member");
    assert!(
        text(&out.stderr).contains("the archive has no member libnope.so"),
        "{}",
        text(&out.stderr)
    );

    // Raw code: the text of answer.o alone, which no ELF header describes.
    let object = C::new("tests/fixtures/cli/answer.c")
        .flags(&["-O2", "-c"])
        .output("answer.o")
        .dir(&case.dir)
        .build();
    shell(&format!(
        "objcopy -O binary --only-section=.text {} answer.bin",
        object.display()
    ));
    let flat = "uprobe:./answer.bin:0x0 { printf(\"flat\\n\"); exit(); }";
    let (printed, stderr) = traced(&["--unsafe", "-e", flat], "answer.bin", 0);
    assert_eq!(printed.trim(), "flat", "{stderr}");
    assert!(
        stderr.contains("WARNING: Could not determine instruction boundary for uprobe:./answer.bin:0x0 (binary appears stripped). Misaligned probes can lead to tracee crashes!"),
        "{stderr}"
    );
    // Without --unsafe, a file that is not ELF is refused.
    let out = case.run(&["-e", flat]);
    assert_status(&out, 1, "flat code without --unsafe");
}

/// The offset in the file `path` of the code of function `symbol`, as
/// binutils give it (`nm`, and `readelf -l`'s segments).
fn file_offset_of(path: &Path, symbol: &str) -> u64 {
    let run = |program: &str, args: &[&str]| {
        let out = Command::new(program).args(args).arg(path).output().unwrap();
        text(&out.stdout)
    };
    let address = run("nm", &[])
        .lines()
        .find_map(|l| {
            l.strip_suffix(&format!(" T {symbol}"))
                .map(|a| u64::from_str_radix(a, 16).unwrap())
        })
        .unwrap_or_else(|| panic!("{symbol} in nm {}", path.display()));
    run("readelf", &["-lW"])
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .find_map(|l| {
            let f: Vec<u64> = (l.split_whitespace().skip(1).take(4))
                .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap())
                .collect();
            let (offset, vaddr, size) = (f[0], f[1], f[3]);
            (vaddr..vaddr + size)
                .contains(&address)
                .then(|| address - vaddr + offset)
        })
        .unwrap_or_else(|| panic!("{symbol} in no LOAD segment of {}", path.display()))
}

/// Probes are counted as bpftrace 0.24 and later count them (a USDT probe
/// once per file, whatever its sites), and a glob in the file part
/// attaches to every matching file, named as it matched.
#[test]
fn globs_over_files_and_how_probes_are_counted() {
    let Some(case) = Case::root("globs") else {
        return;
    };
    let out = case.run(&[
        "-e",
        "usdt:./ticker:ticker:tick { @n = count(); }",
        "-c",
        "./ticker 4",
    ]);
    assert_eq!(lines(&out.stdout)[0], "Attaching 1 probe...");
    assert!(
        text(&out.stdout).contains("@n: 4"),
        "both sites: {}",
        text(&out.stdout)
    );
    let out = case.run(&[
        "-e",
        "usdt:./ticke*:ticker:tick { @[probe] = count(); } uprobe:./ticker*:work { @w[probe] = count(); }",
        "-c",
        "sh -c './ticker 3; ./ticker_b 2'",
    ]);
    assert_status(&out, 0, "globs");
    let stdout = text(&out.stdout);
    assert_eq!(lines(&out.stdout)[0], "Attaching 4 probes...", "{stdout}");
    for line in [
        "@[usdt:./ticker:ticker:tick]: 3",
        "@[usdt:./ticker_b:ticker:tick]: 2",
        "@w[uprobe:./ticker:work]: 3",
        "@w[uprobe:./ticker_b:work]: 2",
    ] {
        assert!(stdout.contains(line), "{line} in:\n{stdout}");
    }
}

/// With `-p`, tracepoints fire for the traced process only (and, unless
/// --no-follow, the processes it starts), as bpftrace 0.24's `-p` applies
/// to every probe.
#[test]
fn p_applies_to_tracepoints_too() {
    let Some(case) = Case::root("pid-tracepoints") else {
        return;
    };
    let traced = case.ticker(&["400", "5"]);
    let other = case.ticker(&["400", "5"]);
    let pid = traced.0.id().to_string();
    let program =
        "tracepoint:syscalls:sys_enter_getppid { @[pid] = count(); } interval:ms:400 { exit(); }";
    for extra in [&[][..], &["--no-follow"]] {
        let mut args = vec!["-p", pid.as_str(), "-e", program];
        args.extend_from_slice(extra);
        let out = case.run(&args);
        assert_status(&out, 0, "-p with a tracepoint");
        let stdout = text(&out.stdout);
        assert!(stdout.contains(&format!("@[{pid}]: ")), "{stdout}");
        assert!(
            !stdout.contains(&format!("@[{}]: ", other.0.id())),
            "the other process is not seen: {stdout}"
        );
    }
}

/// Installed as `bpftrace` (a link, or `sdt bpftrace`), the process's
/// name is `bpftrace`, as scripts that leave out their own tracer expect.
#[test]
fn the_process_is_named_bpftrace() {
    let Some(case) = Case::root("comm") else {
        return;
    };
    let program = "BEGIN { printf(\"%s\\n\", comm); exit(); }";
    let out = case.run(&["-q", "-e", program]);
    assert_eq!(lines(&out.stdout)[0], "bpftrace");
    let out = case.sdt(&["bpftrace", "-q", "-e", program]);
    assert_eq!(lines(&out.stdout)[0], "bpftrace");
    let out = case.sdt(&["run", "-q", "-e", program]);
    assert_eq!(lines(&out.stdout)[0], "sdt");
}

/// `-l`: patterns with globs over files, uretprobes, intervals, a bare
/// name, a program's probes, and a pattern that looks like a missing file.
#[test]
fn listing() {
    let Some(case) = Case::root("listing") else {
        return;
    };
    let list = |args: &[&str]| {
        let out = case.run(args);
        assert_status(&out, 0, &format!("{args:?}"));
        lines(&out.stdout)
    };
    assert_eq!(
        list(&["-l", "interval:*"]),
        [
            "interval:hz:",
            "interval:ms:",
            "interval:s:",
            "interval:us:"
        ]
    );
    assert_eq!(
        list(&["-l", "uretprobe:./ticker:wor*"]),
        ["uretprobe:./ticker:work"]
    );
    assert_eq!(
        list(&["-l", "uprobe:./tick*:work"]),
        ["uprobe:./ticker:work", "uprobe:./ticker_b:work"]
    );
    assert_eq!(
        list(&["-l", "usdt:./ticker*:ticker:*"]),
        ["usdt:./ticker:ticker:tick", "usdt:./ticker_b:ticker:tick"]
    );
    assert!(list(&["-l", "*sched_switch*"]).contains(&"tracepoint:sched:sched_switch".to_string()));
    assert!(list(&["-l", "tracepoint:sched:*"]).len() > 5);
    let program =
        "uprobe:./ticker:work { } interval:ms:5 { } BEGIN { } t:syscalls:sys_enter_getppid { }";
    let expected = [
        "interval:ms:",
        "tracepoint:syscalls:sys_enter_getppid",
        "uprobe:./ticker:work",
    ];
    assert_eq!(list(&["-l", "-e", program]), expected);
    let file = case.write("probes.bt", program);
    assert_eq!(list(&["-l", &file]), expected);
    let out = case.run(&["-l", "missing_file.bt"]);
    assert!(text(&out.stderr).starts_with(
        "WARNING: It appears that 'missing_file.bt' is a filename but the file does not exist."
    ));
    let out = case.run(&["-l", "\n"]);
    assert_status(&out, 1, "an invalid character");
    assert!(text(&out.stderr).starts_with("ERROR: invalid character"));
}

/// `--probe-filter` keeps the attach points it matches, and BEGIN and
/// END; `--include` and `#include` read definitions and constants.
#[test]
fn probe_filter_and_headers() {
    let Some(case) = Case::root("filter") else {
        return;
    };
    let program = "BEGIN { printf(\"begin\\n\"); } interval:ms:10 { printf(\"bad\\n\"); exit(); } \
                   interval:ms:30 { printf(\"kept\\n\"); exit(); } END { printf(\"end\\n\"); }";
    let out = case.run(&["--probe-filter", "ms:(20|30)", "-e", program]);
    assert_status(&out, 0, "--probe-filter");
    let stdout = lines(&out.stdout);
    assert_eq!(
        stdout[..4],
        ["Attaching 3 probes...", "begin", "kept", "end"],
        "{stdout:?}"
    );
    std::fs::create_dir_all(case.dir.join("inc")).unwrap();
    case.write(
        "inc/defs.h",
        "#pragma once\n#define LIMIT 42\nstruct pair { port_t a; long b; };\nint helper(void);\n",
    );
    case.write("extra.h", "typedef unsigned short port_t;\n");
    let out = case.run(&[
        "-I",
        "inc",
        "--include",
        "extra.h",
        "-e",
        "#include <defs.h>\nBEGIN { printf(\"%d %d\\n\", LIMIT, sizeof(struct pair)); exit(); }",
    ]);
    assert_status(&out, 0, "headers");
    assert!(
        lines(&out.stdout).contains(&"42 16".to_string()),
        "{}",
        text(&out.stdout)
    );
}
