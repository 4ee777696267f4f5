//! What installing sdt takes besides the binary: shell completions and
//! man pages, generated from the same command-line definitions that parse
//! the arguments, so they never disagree with them.

use std::process::Command;

use sdt_testing::require;

const SDT: &str = env!("CARGO_BIN_EXE_sdt");

fn sdt(args: &[&str]) -> String {
    let out = Command::new(SDT).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn bash_loads_the_completions_and_they_know_every_command_and_option() {
    if !require(sdt_testing::have("bash"), "bash") {
        return;
    }
    let script = sdt(&["completions", "bash"]);
    for word in [
        "run",
        "trace",
        "serve",
        "stackcount",
        "--cgroup",
        "--no-watch",
    ] {
        assert!(script.contains(word), "{word} is not completed");
    }
    // Bash reads it and binds it to `sdt`.
    let out = Command::new("bash")
        .args(["-c", "source /dev/stdin; complete -p sdt"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut bash| {
            use std::io::Write;
            bash.stdin.take().unwrap().write_all(script.as_bytes())?;
            bash.wait_with_output()
        })
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("-F _sdt") && said.trim_end().ends_with(" sdt"),
        "{said}"
    );
    for shell in ["zsh", "fish"] {
        assert!(sdt(&["completions", shell]).contains("serve"), "{shell}");
    }
    let bad = Command::new(SDT)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn every_command_has_a_man_page_with_its_options() {
    let dir = tempfile::tempdir().unwrap();
    sdt(&["manpages", &dir.path().display().to_string()]);
    let page = |name: &str| {
        std::fs::read_to_string(dir.path().join(format!("{name}.1")))
            .unwrap_or_else(|e| panic!("{name}.1: {e}"))
    };
    assert!(page("sdt").contains(".TH sdt 1"));
    let run = page("sdt-run");
    for option in [r"\-\-cgroup", r"\-\-serve", r"\-\-flamegraph"] {
        assert!(run.contains(option), "{option} in sdt-run.1");
    }
    assert!(page("sdt-serve").contains(r"\-\-no\-watch"));
    for command in ["list", "trace", "types", "stackcount", "calls", "dtrace"] {
        page(&format!("sdt-{command}"));
    }
    // Internal commands have none.
    assert!(!dir.path().join("sdt-__release.1").exists());
}
