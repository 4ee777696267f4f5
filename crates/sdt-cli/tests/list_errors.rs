//! `sdt list` on bad input: one clear line on stderr, a non-zero exit, and
//! never a panic. Malformed notes are warnings; the rest is still listed.

mod list_common;

#[path = "../../sdt-elf/tests/common/elf_writer.rs"]
mod elf_writer;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Output, Stdio};

use elf_writer::{Elf, TEXT_ADDR};
use list_common::*;

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("list-errors");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Asserts a failure with exactly one line on stderr that contains `needle`.
fn assert_error(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_no_panic(out);
    assert_eq!(stderr.lines().count(), 1, "one line expected: {stderr}");
    assert!(stderr.starts_with("sdt: "), "{stderr}");
    assert!(stderr.contains(needle), "expected `{needle}` in: {stderr}");
    assert!(out.stdout.is_empty(), "nothing on stdout for an error");
}

#[test]
fn missing_file() {
    let out = run(["list", "/no/such/file"]);
    assert_error(&out, "cannot read /no/such/file: No such file or directory");
}

#[test]
fn not_elf() {
    let text = scratch("text");
    std::fs::write(&text, "just text\n").unwrap();
    assert_error(&run([&"list".into(), &text]), "not an ELF file");
    let empty = scratch("empty");
    std::fs::write(&empty, "").unwrap();
    assert_error(&run([&"list".into(), &empty]), "not an ELF file");
    assert_error(
        &run([&"list".into(), &std::env::temp_dir()]),
        "not a regular file",
    );
}

#[test]
fn corrupt_and_truncated_elf() {
    let mut elf = Elf::x86_64();
    elf.probe(TEXT_ADDR, 0, "p", "n", "8@%rax");
    let data = elf.build();
    for (name, len, needle) in [
        ("truncated-header", 40, "corrupt or truncated ELF file"),
        ("truncated-sections", data.len() - 10, "section headers"),
        ("magic-only", 4, "corrupt or truncated ELF file"),
    ] {
        let path = scratch(name);
        std::fs::write(&path, &data[..len]).unwrap();
        assert_error(&run([&"list".into(), &path]), needle);
    }
}

#[test]
fn missing_or_bad_names_and_pids() {
    assert_error(
        &run(["list", "-p", "4194304"]),
        "no process with PID 4194304",
    );
    assert_error(
        &run(["list", "no-such-program-xyz"]),
        "no program or library named `no-such-program-xyz`",
    );
    assert_error(&run(["list"]), "nothing to list");
    assert_error(&run(["list", "python:*"]), "nothing to list");
    let out = run(["list", "-p", "notapid"]);
    assert_eq!(out.status.code(), Some(2));
    assert_no_panic(&out);
}

#[test]
fn bad_pattern() {
    let mut elf = Elf::x86_64();
    elf.probe(TEXT_ADDR, 0, "p", "n", "");
    let path = scratch("for-pattern");
    std::fs::write(&path, elf.build()).unwrap();
    assert_error(
        &run([&"list".into(), &path, &"p:[".into()]),
        "invalid probe pattern `p:[`",
    );
}

#[test]
fn corrupt_notes_warn_and_the_rest_is_listed() {
    let mut elf = Elf::x86_64();
    elf.probe(TEXT_ADDR, 0, "good", "one", "")
        .note(b"stapsdt\0", 3, &[0; 10])
        .probe(TEXT_ADDR + 1, 0, "good", "two", "");
    let path = scratch("corrupt-note");
    std::fs::write(&path, elf.build()).unwrap();
    let out = run([&"list".into(), &path]);
    assert_success(&out, "sdt list");
    let shown = path.display();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{shown} good:one\n{shown} good:two\n")
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "sdt: warning: {shown}: skipped the probe note at file offset 0x"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("too short"), "{stderr}");
}

#[test]
fn no_probes_prints_nothing_and_says_so() {
    let path = scratch("no-probes");
    std::fs::write(&path, Elf::x86_64().build()).unwrap();
    for (flag, expected) in [("-v", ""), ("--json", "[]\n")] {
        let out = run([&"list".into(), &flag.into(), &path]);
        assert_success(&out, "sdt list");
        assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
        // An empty listing is never mistaken for a failure to look.
        assert_eq!(
            String::from_utf8(out.stderr).unwrap(),
            format!("sdt: {} has no USDT probes\n", path.display())
        );
    }
}

#[test]
fn closed_pipe_is_not_an_error() {
    let mut elf = Elf::x86_64();
    for i in 0..20_000u64 {
        elf.probe(
            TEXT_ADDR + i % 0x1000,
            0,
            "many",
            &format!("probe{i}"),
            "8@%rdi -4@8(%rsp)",
        );
    }
    let path = scratch("many-probes");
    std::fs::write(&path, elf.build()).unwrap();
    for flag in ["-v", "--json"] {
        let mut child = sdt()
            .args([&"list".into(), &flag.into(), &path])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 100];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // stdout is closed now, like `sdt list | head`.
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{flag}: {:?}", out.status);
        assert_no_panic(&out);
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
