//! Types from DWARF: `sdt types` against pahole, and `sdt run` scripts
//! that read every kind of field with no struct definition of their own.
//!
//! The fixture (`tests/fixtures/types/subsys.c`) fires probes with
//! pointers to SPDK-style structs and logs what it passed; the scripts
//! print the same lines from the traced memory, and the two are compared.
//! It is built with DWARF 4, DWARF 5, compressed debug sections
//! (`SHF_COMPRESSED` and GNU `.zdebug_*`), with `-gsplit-dwarf` (a `.dwo`
//! file), and with its debug information split off through
//! `.gnu_debuglink` and through a build-id path.
//!
//! `sdt types` needs no privilege; the `sdt run` tests attach probes and
//! need root. With `CI=true` a missing privilege or tool fails them;
//! elsewhere they print a loud SKIP.

mod list_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use list_common::{assert_no_panic, have, require, sdt};
use sdt_testing::fixture::C;

/// The fixture, built each way.
struct Variants {
    /// `(variant, program, file with its DWARF)`.
    builds: Vec<(&'static str, PathBuf, PathBuf)>,
    stripped: PathBuf,
}

fn run_tool(cmd: &mut Command) {
    let status = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed");
}

fn variants() -> Option<&'static Variants> {
    static BUILT: OnceLock<Option<Variants>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if !require(have("cc"), "a C compiler (cc)") || !require(have("objcopy"), "objcopy") {
                return None;
            }
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("types-fixtures");
            let cc = |out: &str, flags: &[&str]| {
                C::new("tests/fixtures/types/subsys.c")
                    .flags(&["-O2", "-Wl,--build-id"])
                    .flags(flags)
                    .dir(&dir)
                    .output(out)
                    .build()
            };
            let mut builds = Vec::new();
            let d4 = cc("subsys-dwarf4", &["-gdwarf-4"]);
            let d4_copy = d4.clone();
            builds.push(("dwarf4", d4.clone(), d4));
            let d5 = cc("subsys-dwarf5", &["-gdwarf-5"]);
            builds.push(("dwarf5", d5.clone(), d5.clone()));
            // Split DWARF: the types are in a .dwo file beside the program.
            // pahole reads no .dwo; the same source built whole is its
            // reference.
            let split = cc("subsys-split", &["-gdwarf-5", "-gsplit-dwarf"]);
            builds.push(("split-dwarf", split, d5));
            let z = cc("subsys-compressed", &["-gdwarf-5", "-gz=zlib"]);
            builds.push(("compressed", z.clone(), z));
            // GNU-style .zdebug_* sections, as older toolchains made them.
            let gnu = dir.join("subsys-zdebug");
            run_tool(
                Command::new("objcopy")
                    .arg("--compress-debug-sections=zlib-gnu")
                    .arg(&d4_copy)
                    .arg(&gnu),
            );
            builds.push(("zdebug", gnu.clone(), gnu));

            // Debug information in a separate file, found by .gnu_debuglink.
            let linked = cc("subsys-debuglink", &["-g"]);
            let linked_debug = dir.join("subsys-debuglink.debug");
            run_tool(
                Command::new("objcopy")
                    .arg("--only-keep-debug")
                    .arg(&linked)
                    .arg(&linked_debug),
            );
            run_tool(
                Command::new("objcopy")
                    .arg("--strip-debug")
                    .arg(format!("--add-gnu-debuglink={}", linked_debug.display()))
                    .arg(&linked),
            );
            builds.push(("debuglink", linked, linked_debug));

            // Found by build-id, under /usr/lib/debug (root only: that is
            // where debuggers and sdt look).
            if sdt_testing::require_root() {
                let by_id = cc("subsys-buildid", &["-g", "-O1"]);
                let id = build_id(&by_id);
                let debug = PathBuf::from(format!(
                    "/usr/lib/debug/.build-id/{}/{}.debug",
                    &id[..2],
                    &id[2..]
                ));
                std::fs::create_dir_all(debug.parent().unwrap()).unwrap();
                run_tool(
                    Command::new("objcopy")
                        .arg("--only-keep-debug")
                        .arg(&by_id)
                        .arg(&debug),
                );
                run_tool(Command::new("objcopy").arg("--strip-debug").arg(&by_id));
                builds.push(("build-id", by_id, debug));
            }

            let stripped = cc("subsys-stripped", &["-s"]);
            Some(Variants { builds, stripped })
        })
        .as_ref()
}

/// The build-id of `path`, in hex, as readelf shows it.
fn build_id(path: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(path)
        .output()
        .expect("run readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build-id note")
        .trim()
        .to_string()
}

fn sdt_ok(args: &[&str]) -> Output {
    let out = sdt().args(args).output().expect("run sdt");
    assert_no_panic(&out);
    assert!(
        out.status.success(),
        "sdt {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `(name, offset, size)` of each top-level member, from pahole's layout.
fn pahole_members(file: &Path, name: &str) -> Vec<(String, u64, u64)> {
    let out = Command::new("pahole")
        .arg("-C")
        .arg(name)
        .arg(file)
        .output()
        .expect("run pahole");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut members = Vec::new();
    for line in text.lines() {
        // Top-level members are indented by one tab; nested ones by more.
        let Some(rest) = line.strip_prefix('\t') else {
            continue;
        };
        if rest.starts_with('\t') || rest.starts_with("/*") {
            continue;
        }
        let Some((decl, comment)) = rest.split_once("/*") else {
            continue;
        };
        let decl = decl.trim().trim_end_matches(';');
        let name = decl
            .rsplit(|c: char| c.is_whitespace() || c == '*' || c == '}')
            .next()
            .unwrap()
            .split(['[', ':'])
            .next()
            .unwrap()
            .to_string();
        let numbers: Vec<u64> = comment
            .trim_end_matches("*/")
            .split([' ', ':'])
            .filter_map(|w| w.parse().ok())
            .collect();
        let (offset, size) = match numbers[..] {
            [offset, size] => (offset, size),
            [offset, _bit, size] => (offset, size),
            _ => panic!("pahole line {line:?}"),
        };
        members.push((name, offset, size));
    }
    members
}

fn sdt_members(file: &Path, name: &str) -> (Vec<(String, u64, u64)>, u64) {
    let out = sdt_ok(&["types", "--json", file.to_str().unwrap(), name]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let members = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["offset"].as_u64().unwrap(),
                m["size"].as_u64().unwrap(),
            )
        })
        .collect();
    (members, v["size"].as_u64().unwrap())
}

#[test]
fn sdt_types_matches_pahole_in_every_build() {
    let Some(v) = variants() else { return };
    if !require(have("pahole"), "pahole (Debian dwarves)") {
        return;
    }
    for (variant, program, debug) in &v.builds {
        for name in ["subsystem", "listener"] {
            let (ours, _) = sdt_members(program, &format!("struct {name}"));
            let theirs = pahole_members(debug, name);
            assert!(theirs.len() >= 2, "{variant}: pahole printed {theirs:?}");
            assert_eq!(ours, theirs, "{variant}: struct {name}");
        }
    }
}

#[test]
fn sdt_types_prints_enums_with_values_and_explains_missing_names() {
    let Some(v) = variants() else { return };
    let (_, program, _) = &v.builds[1];
    let out = sdt_ok(&[
        "types",
        "--json",
        program.to_str().unwrap(),
        "enum subsystem_state",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<(String, i64)> = json["enumerators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().into(),
                e["value"].as_i64().unwrap(),
            )
        })
        .collect();
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/types/subsys.c"),
    )
    .unwrap();
    for (i, (name, value)) in names.iter().enumerate() {
        assert_eq!(*value, i as i64);
        assert!(
            source.contains(&format!("\t{name},")),
            "{name} is in the source"
        );
    }
    assert_eq!(names.len(), 6);

    let out = sdt()
        .args(["types", program.to_str().unwrap(), "subsytem"])
        .output()
        .unwrap();
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no type `subsytem`") && err.contains("struct subsystem"),
        "{err}"
    );

    let out = sdt()
        .args(["types", v.stripped.to_str().unwrap(), "struct subsystem"])
        .output()
        .unwrap();
    assert_no_panic(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no debug information") && err.contains("-dbgsym"),
        "{err}"
    );
    assert!(
        err.contains("/usr/lib/debug/.build-id/"),
        "says where it looked: {err}"
    );
}

#[test]
fn a_name_defined_differently_in_two_units_is_ambiguous() {
    if !require(have("cc"), "a C compiler (cc)") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("types-ambiguous");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("one.c"),
        "struct conn { int fd; }; struct conn one_conn;\nint main(void) { return one_conn.fd; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("two.c"),
        "struct conn { long id; char name[8]; }; struct conn two_conn;\n",
    )
    .unwrap();
    let program = C::new(dir.join("one.c"))
        .source(dir.join("two.c"))
        .flags(&["-g"])
        .dir(&dir)
        .output("ambiguous")
        .build();
    let out = sdt()
        .args(["types", program.to_str().unwrap(), "struct conn"])
        .output()
        .unwrap();
    assert_no_panic(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("one.c") && err.contains("two.c") && err.contains("--unit"),
        "{err}"
    );
    // --unit picks one.
    for (unit, member) in [("two.c", "name"), ("one.c", "fd")] {
        let out = sdt()
            .args([
                "types",
                "--json",
                "--unit",
                unit,
                program.to_str().unwrap(),
                "struct conn",
            ])
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let names: Vec<&str> = json["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&member), "{unit}: {names:?}");
    }
}

/// What the script prints for one run of the fixture, and the fixture's log.
fn traced(program: &Path, script: &str) -> (String, String) {
    let log = program.with_extension("log");
    let command = format!("{} {}", program.display(), log.display());
    let out = sdt_ok(&["run", "-c", &command, "-e", script]);
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        printed,
        std::fs::read_to_string(&log).expect("the fixture's log"),
    )
}

const FIELDS: &str = r#"
usdt:PROGRAM:subsys:created {
  $s = (struct subsystem *)arg0;
  printf("created id=%u subnqn=%s state=%s reads=%llu errors=%d\n", $s->id, $s->subnqn, $s->state, $s->stats.reads, $s->stats.errors);
  printf("listener1 port=%u traddr=%s\n", $s->listeners[1].port, $s->listeners[1].traddr);
  printf("bits allow=%u ana=%u max=%u prio=%d\n", $s->allow_any_host, $s->ana_reporting, $s->max_namespaces, $s->priority);
  printf("token raw=%llu hi=%u\n", $s->token.raw, $s->token.halves.hi);
  printf("description %s\n", $s->description);
  printf("next id=%u self id=%u\n", $s->next != 0 ? $s->next->id : 0, (*$s->self)->id);
}
usdt:PROGRAM:subsys:state_change {
  printf("state %s %s %s\n", ((struct subsystem *)arg0)->subnqn, (enum subsystem_state)arg1, (enum subsystem_state)arg2);
  @to[(enum subsystem_state)arg2] = count();
  @last[((struct subsystem *)arg0)->subnqn] = (enum subsystem_state)arg2;
}
END { print(@last); }
"#;

#[test]
fn scripts_read_every_kind_of_field_from_dwarf_in_every_build() {
    let Some(v) = variants() else { return };
    if !sdt_testing::require_root() {
        return;
    }
    for (variant, program, _) in &v.builds {
        let script = FIELDS.replace("PROGRAM", program.to_str().unwrap());
        let (printed, log) = traced(program, &script);
        let mut want: Vec<String> = Vec::new();
        for line in log.lines().filter(|l| !l.starts_with("fopen")) {
            want.push(line.to_string());
        }
        let mut got: Vec<String> = Vec::new();
        for line in printed.lines() {
            if let Some(text) = line.strip_prefix("description ") {
                // The 4096-byte array, read whole: the log has its length
                // and what follows the 4000 'd's.
                got.push(format!(
                    "description len={} tail={}",
                    text.len(),
                    &text[4000.min(text.len())..]
                ));
            } else if line.starts_with("created")
                || line.starts_with("listener1")
                || line.starts_with("bits")
                || line.starts_with("token")
                || line.starts_with("next")
                || line.starts_with("state")
            {
                got.push(line.to_string());
            }
        }
        assert_eq!(got, want, "{variant}: {printed}");
        // An enum-typed map value prints by name in print() and at exit; a
        // char array is a map key.
        let mut last = std::collections::BTreeMap::new();
        for line in log.lines().filter(|l| l.starts_with("state ")) {
            let w: Vec<&str> = line.split(' ').collect();
            last.insert(w[1], w[3]);
        }
        for (subnqn, state) in &last {
            let line = format!("@last[{subnqn}]: {state}");
            let count = printed.lines().filter(|l| *l == line).count();
            assert_eq!(
                count, 2,
                "{variant}: {line} in print() and at exit: {printed}"
            );
        }
        // Map keys of an enum type print by name, unknown values as numbers.
        for expected in [
            "@to[SUBSYSTEM_ACTIVATING]: 2",
            "@to[SUBSYSTEM_ACTIVE]: 2",
            "@to[SUBSYSTEM_PAUSING]: 1",
            "@to[42]: 1",
        ] {
            assert!(
                printed.lines().any(|l| l == expected),
                "{variant}: {expected} in {printed}"
            );
        }
    }
}

#[test]
fn libc_file_struct_from_libc6_dbg() {
    let Some(v) = variants() else { return };
    if !sdt_testing::require_root()
        || !require(
            Path::new("/usr/lib/debug/.build-id").is_dir(),
            "libc6-dbg (debug files by build-id)",
        )
    {
        return;
    }
    let program = &v.builds[1].1;
    let script = "uretprobe:libc:fopen { printf(\"fopen fd=%d\\n\", ((struct _IO_FILE *)retval)->_fileno); }";
    let (printed, log) = traced(program, script);
    let got: Vec<&str> = printed.lines().filter(|l| l.starts_with("fopen")).collect();
    let want: Vec<&str> = log.lines().filter(|l| l.starts_with("fopen")).collect();
    assert_eq!(got, want, "{printed}");
}

#[test]
fn script_errors_point_at_the_cast() {
    let Some(v) = variants() else { return };
    if !sdt_testing::require_root() {
        return;
    }
    let (_, program, _) = &v.builds[1];
    let p = program.to_str().unwrap();
    let check = |program: &str, body: &str, wanted: &[&str]| {
        let script = format!("usdt:{program}:subsys:created {{ {body} }}");
        let out = sdt().args(["run", "-e", &script]).output().unwrap();
        assert_no_panic(&out);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        for w in wanted {
            assert!(err.contains(w), "{w:?} in {err}");
        }
    };
    check(
        p,
        "print(((struct subsystem *)arg0)->subnq);",
        &["has no field `subnq`", "subnqn", "1:"],
    );
    check(
        p,
        "print(((struct subsytem *)arg0)->id);",
        &["unknown type `struct subsytem`", "struct subsystem", "1:"],
    );
    check(
        v.stripped.to_str().unwrap(),
        "print(((struct subsystem *)arg0)->id);",
        &["no debug information", "-dbgsym"],
    );
    // A script definition wins over DWARF.
    let script = format!(
        "struct subsystem {{ int first; }} usdt:{p}:subsys:created {{ print(((struct subsystem *)arg0)->id); }}"
    );
    let out = sdt().args(["run", "-e", &script]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no field `id`"), "{err}");
}

#[test]
fn bpftrace_reads_what_sdt_types_emits() {
    let Some(v) = variants() else { return };
    if !sdt_testing::require_root() || !require(have("bpftrace"), "bpftrace") {
        return;
    }
    let (_, program, _) = &v.builds[1];
    let defs = sdt_ok(&[
        "types",
        "--bpftrace",
        program.to_str().unwrap(),
        "struct subsystem",
    ]);
    let script = format!(
        "{}\nusdt:{}:subsys:state_change {{ $s = (struct subsystem *)arg0; printf(\"state %s %s\\n\", $s->subnqn, @subsystem_state_names[arg2]); }}\n",
        String::from_utf8_lossy(&defs.stdout),
        program.display()
    );
    let log = program.with_extension("bpftrace.log");
    let out = Command::new("bpftrace")
        .arg("-e")
        .arg(&script)
        .arg("-c")
        .arg(format!("{} {}", program.display(), log.display()))
        .output()
        .expect("run bpftrace");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{printed}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<&str> = printed
        .lines()
        .filter(|l| l.starts_with("state "))
        .collect();
    let log = std::fs::read_to_string(&log).unwrap();
    let want: Vec<String> = log
        .lines()
        .filter(|l| l.starts_with("state "))
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            // bpftrace prints an empty string for a value with no name.
            let to = if w[3] == "42" { "" } else { w[3] };
            format!("state {} {to}", w[1])
        })
        .collect();
    assert_eq!(got, want, "{printed}");
}

#[test]
fn usdt_arguments_take_name_and_type_from_the_variables_at_the_site() {
    let Some(v) = variants() else { return };
    if !sdt_testing::require_root() {
        return;
    }
    // Split DWARF is left out: the variables' locations are in the .dwo,
    // which sdt reads for types only (see docs/dwarf.md).
    for (variant, program, _) in v.builds.iter().filter(|b| b.0 != "split-dwarf") {
        let p = program.to_str().unwrap();
        // No cast anywhere: `s`, `from` and `to` are the variables the
        // fixture passes, found in the argument registers at the site.
        let script = format!(
            "usdt:{p}:subsys:state_change {{ printf(\"state %s %s %s\\n\", args.s->subnqn, args.from, args.to); }}"
        );
        let (printed, log) = traced(program, &script);
        let got: Vec<&str> = printed
            .lines()
            .filter(|l| l.starts_with("state "))
            .collect();
        let want: Vec<&str> = log.lines().filter(|l| l.starts_with("state ")).collect();
        assert_eq!(got, want, "{variant}: {printed}");

        // -v tells what DWARF typed.
        let command = format!("{p} {}", program.with_extension("v.log").display());
        let out = sdt_ok(&["run", "-v", "-c", &command, "-e", &script]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("args.s = (struct subsystem *)arg0")
                && err.contains("args.to = (enum subsystem_state)arg2"),
            "{variant}: {err}"
        );

        let script = format!("usdt:{p}:subsys:state_change {{ print(args.sub); }}");
        let out = sdt().args(["run", "-e", &script]).output().unwrap();
        assert_no_panic(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("`sub`") && err.contains("its typed arguments are from, s, to"),
            "{variant}: {err}"
        );
    }
}
