//! Why a run may show nothing, said where it can be acted on: at the
//! start, what the traced program lacks; at the end, what never attached
//! and which probes waited for a runtime's switch.
//!
//! A trace that prints nothing has three common causes, and sdt knows
//! each of them at some point of the run:
//!
//! - **The program has no such probe.** A probe without a file, under
//!   `-c` or `-p`, means the command's program or the process's objects,
//!   and whatever they map later; one that matches nothing at the start
//!   waits for a later object. At the start sdt names the program that
//!   lacks it (what a `-c` command runs after `env`, `PATH` and `#!`
//!   lines, or a `-p` process's program) and, for a known runtime built
//!   without probes, says where one with them is. A command that reaches
//!   its program through a shell script (a pyenv shim, a wrapper) runs
//!   what the script decides when it runs: sdt says so and names nothing
//!   it cannot know. A probe in a file the program loads (a library it
//!   links, the JVM's `libjvm.so`) is named with that file.
//! - **It never appeared.** At the end, an attach point still without a
//!   site is said to be so, with the programs the traced processes ran,
//!   and, for a runtime built without probes, where one with them is.
//! - **It waits for a switch.** CPython's `function__entry`, the JVM's
//!   method and allocation probes, PHP's and Ruby's call probes fire only
//!   while a switch is on ([`sdt_languages::Switch`]). Their hits are
//!   counted by their programs (a per-CPU counter per probe; see
//!   `sdt_codegen::layout::HITS_MAP`), and at the end a switch-gated probe
//!   that fired zero times, or far less than its companion, gets the
//!   switch named.
//!
//! Each is a line on standard error in the request's voice (`sdt:
//! warning:`, `sdt: note:`, `sdt: hint:`, or bpftrace's `WARNING:` and
//! `HINT:`), and, in sdt's voice, a [`Hint`] record for the output, which
//! JSON writes: bpftrace's own output is never added to.

use std::path::{Path, PathBuf};

use sdt_elf::ElfFile;
use sdt_languages::{by_program_name, by_provider, Language};
use sdt_output::Hint;
use sdt_proc::launch::Launch;
use sdt_runtime::run::{ProbeHits, Summary};
use sdt_script::Compilation;
use sdt_trace::ProbeSpec;

use crate::Voice;

/// One thing said.
#[derive(Clone, Debug)]
pub(crate) struct Said {
    level: Level,
    pub hint: Hint,
}

/// How strongly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    /// Something is missing: nothing may be traced.
    Warning,
    /// How tracing will go, where it is not what one expects.
    Note,
    /// What to do.
    Hint,
}

impl Said {
    fn new(level: Level, kind: &'static str, probes: Vec<String>, text: String) -> Said {
        Said {
            level,
            hint: Hint { kind, probes, text },
        }
    }

    /// The line on standard error, as `voice` words it.
    pub fn line(&self, voice: Voice) -> String {
        let text = &self.hint.text;
        match (voice, self.level) {
            (Voice::Sdt, Level::Warning) => format!("sdt: warning: {text}"),
            (Voice::Sdt, Level::Note) => format!("sdt: note: {text}"),
            (Voice::Sdt, Level::Hint) => format!("sdt: hint: {text}"),
            (Voice::Bpftrace, Level::Warning) => format!("WARNING: {text}"),
            (Voice::Bpftrace, _) => format!("HINT: {text}"),
        }
    }
}

/// What the run traces, for the words: the `-c` command and what it
/// runs, or the `-p` processes.
pub(crate) enum Traced<'a> {
    /// What the command runs, and the command as given.
    Command(&'a Launch, &'a str),
    Processes(&'a [i32]),
}

/// An attach point as messages show it: as the script wrote it
/// (`usdt::python:function__entry`), or, for sdt's own program (`sdt
/// trace`'s, made from the specs typed), as the spec was typed
/// (`python:function__entry`).
fn shown(text: &str, target: Option<&str>, probe: &str, internal: bool) -> String {
    match (internal, target) {
        (false, _) => text.to_string(),
        (true, Some(target)) => format!("{target}:{probe}"),
        (true, None) => probe.to_string(),
    }
}

impl Traced<'_> {
    fn who(&self) -> &'static str {
        match self {
            Traced::Command(..) => "the command",
            Traced::Processes([_]) => "the process",
            Traced::Processes(_) => "the processes",
        }
    }
}

/// What to say before the run: for each attach point that waits for an
/// object mapped later because nothing has its probe yet, why.
pub(crate) fn at_start(
    compilation: &Compilation,
    traced: &Traced<'_>,
    internal: bool,
) -> Vec<Said> {
    let mut said = Vec::new();
    let mut seen = Vec::new();
    for bound in compilation.bound.iter().flatten() {
        let (Some(suggestions), Some(spec)) = (&bound.pending, &bound.later) else {
            continue;
        };
        let text = shown(&bound.text, spec.target.as_deref(), &spec.probe, internal);
        if seen.contains(&text) {
            continue;
        }
        seen.push(text.clone());
        let close = sdt_lang::diag::did_you_mean(suggestions)
            .map(|h| format!(" ({h})"))
            .unwrap_or_default();
        let why = match (traced, &spec.target) {
            // A glob over the objects (`usdt:*libfoo*:p:n`): which object
            // is meant is not the program's business.
            (Traced::Command(..), Some(_)) => vec![Said::new(
                Level::Warning,
                "no_probe",
                vec![text.clone()],
                format!("{text} matches no object yet; sdt attaches it when the command maps one that has it{close}"),
            )],
            (Traced::Command(launch, _), None) => in_command(launch, &text, spec, &close),
            (Traced::Processes(pids), _) => in_processes(pids, &text, spec, &close),
        };
        for one in why {
            if !said.iter().any(|s: &Said| s.hint.text == one.hint.text) {
                said.push(one);
            }
        }
    }
    said
}

/// Why `spec` has no site in what the `-c` command runs.
fn in_command(launch: &Launch, text: &str, spec: &ProbeSpec, close: &str) -> Vec<Said> {
    let point = vec![text.to_string()];
    let Some(program) = &launch.program else {
        return vec![Said::new(
            Level::Warning,
            "no_probe",
            point,
            format!("{text} matches no probe yet; sdt attaches it when the command maps an object that has it{close}"),
        )];
    };
    if let Some((name, script)) = launch.wrapper() {
        let who = match by_program_name(name) {
            Some(_) => format!("`{name}` is {}", script.display()),
            None => format!("the command runs {}", script.display()),
        };
        let shell = file_name(program);
        return vec![Said::new(
            Level::Note,
            "wrapper",
            point,
            format!("{text}: {who}, a {shell} script that decides what it runs only when it runs (a shim or a wrapper); sdt attaches the probe in what the command maps once it runs"),
        )];
    }
    let loaded = loaded_files(program, launch);
    if let Some(file) = loaded.iter().find(|f| has_match(f, spec)) {
        return vec![Said::new(
            Level::Note,
            "loaded",
            point,
            format!(
                "{text}: {}, which {} loads, has it; sdt attaches it once the command has mapped that file",
                file.display(),
                file_name(program)
            ),
        )];
    }
    let mut said = vec![Said::new(
        Level::Warning,
        "no_probe",
        point.clone(),
        format!(
            "{text}: {}, which the command runs, has no probe {}, nor do the libraries it links; sdt attaches it if the command maps an object that has it{close}",
            program.display(),
            spec.probe
        ),
    )];
    said.extend(built_without(spec, program, point));
    said
}

/// Why `spec` has no site in the `-p` processes.
fn in_processes(pids: &[i32], text: &str, spec: &ProbeSpec, close: &str) -> Vec<Said> {
    let point = vec![text.to_string()];
    let programs: Vec<(i32, Option<PathBuf>)> = pids
        .iter()
        .map(|&pid| (pid, std::fs::read_link(format!("/proc/{pid}/exe")).ok()))
        .collect();
    let named: Vec<String> = programs
        .iter()
        .map(|(pid, exe)| match exe {
            Some(exe) => format!("{pid} ({})", exe.display()),
            None => pid.to_string(),
        })
        .collect();
    let (who, maps) = match named.as_slice() {
        [one] => (format!("process {one}"), "maps"),
        _ => (format!("processes {}", named.join(", ")), "map"),
    };
    let mut said = vec![Said::new(
        Level::Warning,
        "no_probe",
        point.clone(),
        format!(
            "{text}: {who} {maps} no object with a probe {}; sdt attaches it if {} {maps} one{close}",
            spec.probe,
            if named.len() == 1 { "it" } else { "they" },
        ),
    )];
    for (_, exe) in &programs {
        if let Some(exe) = exe {
            said.extend(built_without(spec, exe, point.clone()));
        }
    }
    said
}

/// The files a program loads that may hold probes before it runs: the
/// libraries it links, and for a runtime the file it loads its probes
/// from (the JVM's `libjvm.so`).
fn loaded_files(program: &Path, launch: &Launch) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Ok(file) = ElfFile::open(program) {
        files.extend(
            sdt_elf::needed_libraries(
                program,
                file.data(),
                launch.var("LD_LIBRARY_PATH").as_deref(),
            )
            .unwrap_or_default(),
        );
    }
    if let Some((_, file)) = sdt_languages::by_program(program) {
        if file != program && !files.contains(&file) {
            files.push(file);
        }
    }
    files
}

/// Whether the ELF file at `path` has a probe `spec` selects.
fn has_match(path: &Path, spec: &ProbeSpec) -> bool {
    ElfFile::open(path).is_ok_and(|file| {
        file.probes()
            .is_ok_and(|probes| probes.iter().any(|p| spec.matches(p.provider, p.name)))
    })
}

/// The runtime whose provider `spec` names, if it names one plainly.
fn spec_language(spec: &ProbeSpec) -> Option<&'static Language> {
    let (provider, _) = spec.probe.split_once(':')?;
    by_provider(provider)
}

/// For a probe of a known runtime, and a program that is that runtime
/// by its name but has none of its probes, nor do the files it loads
/// them from (the libraries it links, the JVM's `libjvm.so`): that it was
/// built without them, and where one with them is.
fn built_without(spec: &ProbeSpec, program: &Path, probes: Vec<String>) -> Option<Said> {
    let language = spec_language(spec)?;
    let (is, file) = sdt_languages::by_program(program)?;
    if is.name != language.name
        || language.has_probes(program)
        || loaded_files(program, &Launch::default())
            .iter()
            .any(|f| language.has_probes(f))
    {
        return None;
    }
    Some(Said::new(
        Level::Hint,
        "no_probe",
        probes,
        language.without_probes(&file),
    ))
}

/// A file's name, for sentences: `bash`.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// What to say once the run has ended: attach points that never found
/// their probe, and probes that waited for a runtime's switch in vain.
pub(crate) fn at_end(summary: &Summary, traced: &Traced<'_>, internal: bool) -> Vec<Said> {
    let mut said = unattached(summary, traced, internal);
    said.extend(switches(&summary.counted, |language| {
        switch_seen(language, traced)
    }));
    said
}

/// The attach points that never found their probe, in one warning, with
/// the programs the traced processes ran (the runtime's, for a runtime's
/// probes) and, for a runtime built without probes, where one with them
/// is.
fn unattached(summary: &Summary, traced: &Traced<'_>, internal: bool) -> Vec<Said> {
    let unattached = &summary.unattached;
    let mut points: Vec<String> = Vec::new();
    for waited in &unattached.specs {
        let text = shown(
            &waited.text,
            waited.target.as_deref(),
            &waited.probe,
            internal,
        );
        if !points.contains(&text) {
            points.push(text);
        }
    }
    if points.is_empty() {
        return Vec::new();
    }
    let specs: Vec<ProbeSpec> = unattached
        .specs
        .iter()
        .filter_map(|waited| ProbeSpec::parse(&waited.probe).ok())
        .collect();
    let languages: Vec<&Language> = specs.iter().filter_map(spec_language).collect();
    // A runtime's probes: name the programs of that runtime it ran.
    let programs: Vec<&PathBuf> = unattached
        .programs
        .iter()
        .filter(|p| {
            languages.is_empty()
                || sdt_languages::by_program(p)
                    .is_some_and(|(l, _)| languages.iter().any(|w| w.name == l.name))
        })
        .collect();
    const SHOWN: usize = 5;
    let ran = match programs.len() {
        0 => String::new(),
        n => {
            let mut names: Vec<String> = programs
                .iter()
                .take(SHOWN)
                .map(|p| p.display().to_string())
                .collect();
            if n > SHOWN {
                names.push(format!("and {} more", n - SHOWN));
            }
            format!("; it ran {}", names.join(", "))
        }
    };
    let (verb, who) = (if points.len() == 1 { "was" } else { "were" }, traced.who());
    let mut said = vec![Said::new(
        Level::Warning,
        "unattached",
        points.clone(),
        format!(
            "{} {verb} never attached: no object {who} mapped has it{ran}",
            points.join(", ")
        ),
    )];
    let mut hinted: Vec<String> = Vec::new();
    for program in programs {
        for spec in &specs {
            if let Some(hint) = built_without(spec, program, points.clone()) {
                if !hinted.contains(&hint.hint.text) {
                    hinted.push(hint.hint.text.clone());
                    said.push(hint);
                }
            }
        }
    }
    said
}

/// Whether what is traced shows `language`'s switch on, where that can be
/// seen from outside: in the command or the environment it gets, or in
/// every `-p` process's environment and command line. Then a probe that
/// waits for it and fired zero times is not told of it (a JVM started
/// with the flag that ran no method).
fn switch_seen(language: &Language, traced: &Traced<'_>) -> bool {
    let Some(needle) = language.switch.seen_as else {
        return false;
    };
    match traced {
        Traced::Command(launch, command) => {
            command.contains(needle)
                || launch
                    .assignments
                    .iter()
                    .any(|(name, value)| format!("{name}={value}").contains(needle))
                || (!launch.clears_environment
                    && std::env::vars_os().any(|(name, value)| {
                        let pair =
                            format!("{}={}", name.to_string_lossy(), value.to_string_lossy());
                        pair.contains(needle)
                    }))
        }
        Traced::Processes([]) => false,
        Traced::Processes(pids) => pids
            .iter()
            .all(|&pid| language.switch_seen(pid) == Some(true)),
    }
}

/// Switch-gated probes that fired zero times (or, beside a companion,
/// less than a tenth as often as it; see [`sdt_languages::Gated`]): per
/// runtime, one hint that names them with their counts, and the switch.
fn switches(counted: &[ProbeHits], seen: impl Fn(&Language) -> bool) -> Vec<Said> {
    let attached = |provider: &str, name: &str| {
        counted
            .iter()
            .find(|c| c.provider == provider && c.name == name && c.sites > 0)
    };
    let mut said = Vec::new();
    for language in sdt_languages::LANGUAGES {
        let mut quiet: Vec<&ProbeHits> = Vec::new();
        let mut beside: Vec<&ProbeHits> = Vec::new();
        for gated in language.switch.gated {
            let Some(probe) = attached(language.provider, gated.probe) else {
                continue;
            };
            let companion = gated
                .companion
                .and_then(|name| attached(language.provider, name));
            match companion {
                Some(companion) if probe.hits * 10 < companion.hits => {
                    quiet.push(probe);
                    beside.push(companion);
                }
                _ if probe.hits == 0 => quiet.push(probe),
                _ => {}
            }
        }
        if quiet.is_empty() || seen(language) {
            continue;
        }
        let name = |p: &ProbeHits| format!("{}:{}", p.provider, p.name);
        let mut counts = quiet.iter().chain(&beside);
        let first = counts.next().expect("quiet is not empty");
        let mut fired = format!("{} fired {}", name(first), times(first.hits));
        for p in counts {
            fired.push_str(&format!(", {} {}", name(p), times(p.hits)));
        }
        said.push(Said::new(
            Level::Hint,
            "switch",
            quiet.iter().map(|p| name(p)).collect(),
            format!(
                "{fired}: {}; sdt calls and sdt flow switch it on for a -c command",
                language.switch_sentence()
            ),
        ));
    }
    said
}

/// `0 times`, `1 time`.
fn times(n: u64) -> String {
    format!("{n} time{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is said of these hits when no switch is seen on.
    fn switches_of(counted: &[ProbeHits]) -> Vec<Said> {
        switches(counted, |_| false)
    }

    #[test]
    fn a_switch_seen_on_says_nothing() {
        let counted = [hits("hotspot", "method__entry", 1, 0)];
        assert!(switches(&counted, |l| l.name == "java").is_empty());
        let launch = Launch::default();
        let java = sdt_languages::language("java").unwrap();
        let with_flag = Traced::Command(&launch, "java -XX:+ExtendedDTraceProbes -jar x.jar");
        assert!(switch_seen(java, &with_flag));
        let python = sdt_languages::language("python").unwrap();
        assert!(!switch_seen(python, &with_flag), "seen only from inside");
    }

    fn hits(provider: &str, name: &str, sites: usize, hits: u64) -> ProbeHits {
        ProbeHits {
            provider: provider.into(),
            name: name.into(),
            sites,
            hits,
        }
    }

    #[test]
    fn a_gated_probe_that_never_fired_gets_its_switch() {
        let said = switches_of(&[
            hits("hotspot", "method__entry", 1, 0),
            hits("hotspot", "method__return", 1, 0),
            hits("hotspot", "object__alloc", 0, 0),
        ]);
        assert_eq!(said.len(), 1);
        assert_eq!(
            said[0].hint.probes,
            ["hotspot:method__entry", "hotspot:method__return"]
        );
        let line = said[0].line(Voice::Sdt);
        assert!(
            line.starts_with("sdt: hint: hotspot:method__entry fired 0 times, hotspot:method__return 0 times: the JVM fires its method"),
            "{line}"
        );
        assert!(line.contains("-XX:+ExtendedDTraceProbes"), "{line}");
        assert!(said[0]
            .line(Voice::Bpftrace)
            .starts_with("HINT: hotspot:method__entry fired 0 times"));
    }

    #[test]
    fn probes_that_fired_or_were_not_attached_get_nothing() {
        assert!(switches_of(&[hits("hotspot", "method__entry", 1, 7)]).is_empty());
        assert!(switches_of(&[hits("php", "function__entry", 0, 0)]).is_empty());
        assert!(switches_of(&[hits("python", "function__return", 1, 0)]).is_empty());
    }

    #[test]
    fn cpython_s_entry_is_told_by_its_returns() {
        // A handful of entries at start-up (generators closed) beside
        // thousands of returns: the profile function was not set.
        let said = switches_of(&[
            hits("python", "function__entry", 1, 5),
            hits("python", "function__return", 1, 4224),
        ]);
        assert_eq!(said.len(), 1);
        assert!(
            said[0].hint.text.starts_with("python:function__entry fired 5 times, python:function__return 4224 times: CPython 3.11 fires function__entry"),
            "{}",
            said[0].hint.text
        );
        // With the profile function set: as many entries as returns, or,
        // with one written in Python, a quarter as many.
        assert!(switches_of(&[
            hits("python", "function__entry", 1, 4224),
            hits("python", "function__return", 1, 4224),
        ])
        .is_empty());
        assert!(switches_of(&[
            hits("python", "function__entry", 1, 1988),
            hits("python", "function__return", 1, 8209),
        ])
        .is_empty());
        // Entries alone, a few: nothing to compare with, and not zero.
        assert!(switches_of(&[hits("python", "function__entry", 1, 5)]).is_empty());
        assert_eq!(
            switches_of(&[hits("python", "function__entry", 1, 0)]).len(),
            1
        );
    }
}
