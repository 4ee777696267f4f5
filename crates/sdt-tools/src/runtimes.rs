//! The tools' side of the runtime table ([`sdt_languages`], which the
//! session layer reads too): which runtime a tool traces, the files that
//! hold its probes, the placeholders of the tools' programs, and how a
//! `-c` command gets its probes switched on.
//!
//! One table drives every tool: a tool's program names probes and
//! arguments through placeholders (`{{ENTRY}}`, `{{CLASS}}`, ...) that the
//! row of the traced language fills in ([`placeholders`]).
//!
//! **Which files are traced.** The probes are attached by file, for every
//! process that maps it, and the kernel keeps to the `-p`/`-c` process
//! tree (see `sdt_trace::follow`); so what matters is which files hold
//! the runtime's probes, wherever in the tree the runtime runs:
//!
//! 1. With `-p`, the process's mapped objects (read through
//!    `sdt_elf::mapped_objects`): the first whose probes are a runtime's
//!    (its provider: `python`, `ruby`, `php`, `hotspot`), so a program
//!    that embeds `libpython` is found as Python. With `-l LANG`, every
//!    installed object of that runtime with probes too
//!    ([`sdt_languages::installed`]).
//! 2. With `-c`, the command is read without running it ([`sdt_job::launch`]:
//!    `env`, shebangs, `PATH`) down to the ELF program it executes; then
//!    that program's own probes, then those of the libraries it links
//!    (`DT_NEEDED`: `libruby`, an embedded `libpython`), then its name
//!    (`java` → its JDK's `libjvm.so`; a `python*` without probes is
//!    refused as built without them). When that is the program itself,
//!    the probes also mean every object the command's processes map once
//!    they run ([`InCommand`]: the session's "objects mapped after the
//!    start"), so that a child that runs another copy of the runtime is
//!    traced too.
//! 3. With `-c`, when 2 ends at a program that is no runtime (a shell
//!    running a pyenv shim or a wrapper script, which decides what it runs
//!    only when it runs), sdt says so and traces the runtime in what the
//!    command maps once it runs it: never a file picked in advance, which
//!    the command may never run. Without `-l`, the runtime is the one a
//!    name on the way stands for (`python3` in `#!/usr/bin/env python3`);
//!    with none, sdt says in one line that it cannot tell, and suggests
//!    `-l`.
//! 4. With `-l LANG` alone, every installed object of that runtime with
//!    probes, in every process.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sdt_elf::ElfFile;
use sdt_job::launch::{self, Launch};
use sdt_languages::{by_program, by_program_name, installed, provider_language, with_probes};
pub use sdt_languages::{Calls, Frame, Language, LANGUAGES};

pub fn language(name: &str) -> anyhow::Result<&'static Language> {
    sdt_languages::language(name).map_err(anyhow::Error::msg)
}

/// Which of a runtime's probes a tool uses, which decides what must be
/// switched on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probes {
    /// Method entry and return ([`Calls`]): off by default in every
    /// runtime.
    Methods,
    /// A collection's start and end: always on.
    Collections,
    /// Allocations: off by default in Java (Ruby's `object__create`
    /// always fires).
    Allocations,
    /// Thread start and stop: always on.
    Threads,
}

impl Probes {
    /// The names of `language`'s probes of this kind, if it has them.
    fn names(self, language: &Language) -> Option<Vec<&'static str>> {
        Some(match self {
            Probes::Methods => language.calls.as_ref().map(|c| vec![c.entry, c.ret])?,
            Probes::Collections => language.gc.as_ref().map(|g| vec![g.begin, g.end])?,
            Probes::Allocations => language.alloc.as_ref().map(|a| vec![a.probe])?,
            Probes::Threads => language.threads.as_ref().map(|t| vec![t.start, t.stop])?,
        })
    }

    /// Whether any of them waits for `language`'s switch.
    fn switched(self, language: &Language) -> bool {
        self.names(language)
            .unwrap_or_default()
            .iter()
            .any(|name| language.gated(name).is_some())
    }
}

/// The placeholders a tool's program names `language`'s `probes` by,
/// attached where `detected` says; an error if the runtime has no such
/// probes.
///
/// | probes | placeholders |
/// | --- | --- |
/// | methods | `ENTRY`, `RETURN` (attach points), `CLASS`, `METHOD` (expressions) |
/// | collections | `BEGIN`, `END` |
/// | allocations | `ALLOC`, `CLASS` |
/// | threads | `START`, `STOP`, `ID`, `NAME` |
pub fn placeholders(
    detected: &Detected,
    probes: Probes,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let language = detected.language;
    let missing = |what: &str| anyhow::anyhow!("{} has no {what} probes", language.name);
    // The probes, by placeholder, then the expressions.
    let (probes, expressions) = match probes {
        Probes::Methods => {
            let c = language.calls.as_ref().ok_or_else(|| missing("method"))?;
            let names = vec![("CLASS", c.class), ("METHOD", c.method)];
            (vec![("ENTRY", c.entry), ("RETURN", c.ret)], names)
        }
        Probes::Collections => {
            let gc = language.gc.as_ref();
            let gc = gc.ok_or_else(|| missing("garbage-collection"))?;
            (vec![("BEGIN", gc.begin), ("END", gc.end)], Vec::new())
        }
        Probes::Allocations => {
            let a = language
                .alloc
                .as_ref()
                .ok_or_else(|| missing("allocation"))?;
            (vec![("ALLOC", a.probe)], vec![("CLASS", a.class)])
        }
        Probes::Threads => {
            let t = language.threads.as_ref().ok_or_else(|| missing("thread"))?;
            let id = vec![("ID", t.id), ("NAME", t.name)];
            (vec![("START", t.start), ("STOP", t.stop)], id)
        }
    };
    let probes = probes
        .into_iter()
        .map(|(name, probe)| (name, detected.attach_points(probe)));
    let expressions = expressions
        .into_iter()
        .map(|(name, e)| (name, e.to_string()));
    Ok(probes.chain(expressions).collect())
}

/// The runtime found, and where its probes are attached.
pub struct Detected {
    pub language: &'static Language,
    /// Files attached by name, each once (by device and inode), in the
    /// order found.
    pub objects: Vec<PathBuf>,
    /// With `-c`: the probes also mean what the command's processes map.
    pub in_command: Option<InCommand>,
}

/// What the probes mean in a `-c` command's processes, besides
/// [`Detected::objects`]: a probe without a file, which the session
/// attaches to the command's program from the start and to every object
/// its processes map once they run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InCommand {
    /// The command's program is the runtime, with its probes.
    Program(PathBuf),
    /// Which file holds the runtime is known only once the command runs
    /// (a shim or a wrapper script decides).
    Later,
}

impl Detected {
    /// The attach points of the runtime's probe `name`, for one probe
    /// block.
    pub fn attach_points(&self, name: &str) -> String {
        let provider = self.language.provider;
        let mut points: Vec<String> = self
            .objects
            .iter()
            .map(|object| {
                format!(
                    "usdt:{}:{provider}:{name}",
                    crate::quoted(&object.to_string_lossy())
                )
            })
            .collect();
        if self.in_command.is_some() {
            points.push(format!("usdt::{provider}:{name}"));
        }
        points.join(",\n")
    }

    /// Where tracing happens, for the message that says it has started:
    /// the files known now (`/usr/bin/python3.11`), or, when none is,
    /// `the python it runs, once it maps it`.
    pub fn shown(&self) -> String {
        let mut files = self.objects.clone();
        if let Some(InCommand::Program(program)) = &self.in_command {
            files.insert(0, program.clone());
        }
        if files.is_empty() {
            return format!("the {} it runs, once it maps it", self.language.name);
        }
        list(&files)
    }
}

/// What a `-p` process or a `-c` command was found to run.
enum Found {
    /// A runtime, and the file with its probes (which may have none:
    /// [`check_probes`] says so).
    Object(&'static Language, PathBuf),
    /// A program that is no runtime, running a script that decides what
    /// it runs when it runs (a shim, a wrapper); the runtime a name on
    /// the way stands for, if one does.
    Wrapped(Option<&'static Language>, String),
    /// No runtime: what was found instead, for the message.
    Unknown(String),
}

/// Finds the runtime of the `-p` process or of the `-c` command, and
/// where to attach; see the module documentation for the rules. With
/// neither, `-l` names the runtime and every installed copy is traced.
pub fn detect(
    lang: Option<&str>,
    pid: Option<i32>,
    command: Option<&str>,
) -> anyhow::Result<Detected> {
    let wanted = lang.map(language).transpose()?;
    if let (None, Some(command)) = (pid, command) {
        return for_command(wanted, command);
    }
    let found = pid.map(from_process).transpose()?;
    match (wanted, found) {
        (None, Some(Found::Object(language, object))) => {
            check_probes(language, &object)?;
            Ok(Detected {
                language,
                objects: vec![object],
                in_command: None,
            })
        }
        (None, Some(Found::Unknown(what) | Found::Wrapped(_, what))) => {
            anyhow::bail!(cannot_tell(&what, "process's tree"))
        }
        (None, None) => anyhow::bail!("give the language with -l LANG (java, python, ruby, php), a process with -p PID or a command with -c CMD"),
        (Some(language), found) => everywhere(language, found),
    }
}

/// `-l LANG` without `-c`: the `-p` process's runtime object, if it is
/// that runtime's, and every installed copy with probes.
fn everywhere(language: &'static Language, found: Option<Found>) -> anyhow::Result<Detected> {
    let mut objects = Vec::new();
    match found {
        Some(Found::Object(found, object)) if found.name == language.name => {
            check_probes(language, &object)?;
            objects.push(object);
        }
        Some(Found::Object(other, _)) => eprintln!(
            "sdt: note: the traced program runs {}; tracing {} wherever it runs in its process tree",
            other.name, language.name
        ),
        _ => {}
    }
    objects.extend(installed(language));
    let objects = with_probes(language, objects);
    if objects.is_empty() {
        anyhow::bail!(
            "no {} with {} probes found in PATH or the library directories: give the traced program with -p PID or -c CMD",
            language.name,
            language.provider
        );
    }
    Ok(Detected {
        language,
        objects,
        in_command: None,
    })
}

/// The one-line error for a runtime sdt cannot tell, in the `where`.
fn cannot_tell(what: &str, place: &str) -> String {
    format!("cannot tell which runtime to trace: {what}; name it with -l LANG (java, python, ruby, php) and sdt traces it wherever it runs in the {place}")
}

/// `-c`: the runtime the command starts, read without running it, and
/// what its processes map once they run. A command whose runtime is
/// picked by a script when it runs is traced in what it maps, and said
/// so; no file is named in advance.
fn for_command(wanted: Option<&'static Language>, command: &str) -> anyhow::Result<Detected> {
    let launch = launch::read(command)?;
    if launch.clears_environment {
        eprintln!("sdt: note: `env -i` starts the program without the environment through which sdt switches its probes on");
    }
    let later = |language| Detected {
        language,
        objects: Vec::new(),
        in_command: Some(InCommand::Later),
    };
    Ok(match (wanted, from_launch(&launch)) {
        (None, Found::Object(language, object)) => {
            check_probes(language, &object)?;
            in_command(language, object, launch.program.as_deref())
        }
        (Some(wanted), Found::Object(language, object)) if wanted.name == language.name => {
            check_probes(language, &object)?;
            in_command(language, object, launch.program.as_deref())
        }
        (Some(wanted), Found::Object(other, _)) => {
            eprintln!(
                "sdt: note: the command runs {}; tracing {} in what it maps once it runs",
                other.name, wanted.name
            );
            later(wanted)
        }
        (wanted, Found::Wrapped(named, what)) => match wanted.or(named) {
            Some(language) => {
                eprintln!(
                    "sdt: note: {what}; tracing {} in what the command runs, once it maps it",
                    language.name
                );
                later(language)
            }
            None => anyhow::bail!(cannot_tell(&what, "command's process tree")),
        },
        (Some(wanted), Found::Unknown(_)) => later(wanted),
        (None, Found::Unknown(what)) => anyhow::bail!(cannot_tell(&what, "command's process tree")),
    })
}

/// The command runs `object`, a file of `language` with probes: through
/// a probe without a file when it is the program (which also means what
/// the command's processes map once they run: a child running another
/// copy), by name when it is a library the program links or loads
/// (`libruby`, an embedded `libpython`, the JDK's `libjvm`), attached
/// from the start.
fn in_command(language: &'static Language, object: PathBuf, program: Option<&Path>) -> Detected {
    let id = |path: &Path| ElfFile::open(path).ok().map(|f| f.id());
    let is_program = program.is_some_and(|p| id(p).is_some() && id(p) == id(&object));
    if is_program {
        return Detected {
            language,
            objects: Vec::new(),
            in_command: Some(InCommand::Program(object)),
        };
    }
    Detected {
        language,
        objects: vec![object],
        in_command: None,
    }
}

/// The paths, for messages.
pub fn list(objects: &[PathBuf]) -> String {
    let names: Vec<String> = objects.iter().map(|o| o.display().to_string()).collect();
    names.join(", ")
}

/// The runtime of a running process: the first mapped object with a
/// runtime's probes, else its program's name.
fn from_process(pid: i32) -> anyhow::Result<Found> {
    let objects = sdt_elf::mapped_objects(pid as u32)
        .with_context(|| format!("cannot read the mappings of process {pid}"))?;
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let in_root = |path: &Path| root.join(path.strip_prefix("/").unwrap_or(path));
    for object in &objects {
        if let Some(language) = object.file().ok().and_then(provider_language) {
            return Ok(Found::Object(language, in_root(&object.path)));
        }
    }
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .with_context(|| format!("cannot read the program of process {pid}"))?;
    Ok(match by_program(&exe) {
        Some((language, object)) => Found::Object(language, in_root(&object)),
        None => Found::Unknown(format!(
            "process {pid} runs {}, which maps no runtime's probes",
            exe.display()
        )),
    })
}

/// The runtime a command starts, read without running it.
fn from_launch(launch: &Launch) -> Found {
    if let Some(found) = launch
        .program
        .as_deref()
        .and_then(|p| from_program(p, launch))
    {
        // Named by its own path, not a link to it (`python3`).
        return match found {
            Found::Object(language, object) => {
                Found::Object(language, std::fs::canonicalize(&object).unwrap_or(object))
            }
            other => other,
        };
    }
    let named = launch.names.iter().find_map(|n| by_program_name(n));
    if let (Some(program), Some((name, script))) = (&launch.program, launch.wrapper()) {
        let shell = program.file_name().unwrap_or_default().to_string_lossy();
        let script = match by_program_name(name) {
            Some(_) => format!("`{name}` is {}", script.display()),
            None => format!("the command runs {}", script.display()),
        };
        return Found::Wrapped(
            named,
            format!("{script}, a {shell} script that decides what it runs only when it runs (a shim or a wrapper)"),
        );
    }
    let chain: Vec<String> = launch
        .files
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    Found::Unknown(match chain.as_slice() {
        [] => "the command runs no program".to_string(),
        [one] => format!("the command starts {one}, not a runtime sdt knows"),
        [first, .., last] => {
            format!("the command starts {first}, run by {last}, not a runtime sdt knows")
        }
    })
}

/// The runtime of an ELF program: its own probes, those of the libraries
/// it links, or its name.
fn from_program(program: &Path, launch: &Launch) -> Option<Found> {
    let file = ElfFile::open(program).ok()?;
    if let Some(language) = provider_language(&file) {
        return Some(Found::Object(language, program.to_path_buf()));
    }
    let libraries = sdt_elf::needed_libraries(
        program,
        file.data(),
        launch.var("LD_LIBRARY_PATH").as_deref(),
    )
    .unwrap_or_default();
    for library in libraries {
        if let Some(language) = ElfFile::open(&library)
            .ok()
            .as_ref()
            .and_then(provider_language)
        {
            return Some(Found::Object(language, library));
        }
    }
    by_program(program).map(|(language, object)| Found::Object(language, object))
}

/// A runtime built without probes gets a one-line error, which says
/// where one with them is.
fn check_probes(language: &Language, object: &Path) -> anyhow::Result<()> {
    let provider = language.provider;
    let file =
        ElfFile::open(object).with_context(|| format!("cannot open {}", object.display()))?;
    if sdt_languages::has_provider(&file, provider) {
        return Ok(());
    }
    anyhow::bail!(language.without_probes(object))
}

/// What is done before the `-c` command starts so that its probes fire,
/// through its environment; kept alive until the command ends.
pub struct Switched {
    /// Files the environment points at.
    _files: Option<tempfile::TempDir>,
}

/// Switches the probes on for the `-c` command to come, through the
/// environment it inherits, when any of `probes` waits for the runtime's
/// switch ([`sdt_languages::Switch`]):
///
/// - Java: `JAVA_TOOL_OPTIONS=-XX:+ExtendedDTraceProbes` (method and
///   allocation probes).
/// - PHP: `USE_ZEND_DTRACE=1`.
/// - Python: a `sitecustomize` module, first on `PYTHONPATH`, that sets a
///   profile function (the built-in `slice`, which does nothing Python
///   would see) on every thread, because CPython 3.11 fires
///   `function__entry` only while one is set. It hides a
///   `sitecustomize` of the system's.
/// - Ruby: `RUBYOPT=-rFILE` with a file that enables an empty TracePoint,
///   because Ruby fires `method__entry` only while one is enabled.
pub fn switch_on(language: &Language, probes: Probes) -> anyhow::Result<Switched> {
    if !probes.switched(language) {
        return Ok(Switched { _files: None });
    }
    let append = |var: &str, value: &str, separator: &str| {
        let new = match std::env::var(var) {
            Ok(old) if !old.is_empty() => format!("{value}{separator}{old}"),
            _ => value.to_string(),
        };
        std::env::set_var(var, new);
    };
    let mut files = None;
    match language.name {
        "php" => std::env::set_var("USE_ZEND_DTRACE", "1"),
        "java" => append("JAVA_TOOL_OPTIONS", "-XX:+ExtendedDTraceProbes", " "),
        "python" => {
            let dir = tempfile::Builder::new().prefix("sdt-python").tempdir()?;
            std::fs::write(
                dir.path().join("sitecustomize.py"),
                "# Written by sdt: CPython fires function__entry only while a profile function is set.\nimport sys, threading\nsys.setprofile(slice)\nthreading.setprofile(slice)\n",
            )?;
            append("PYTHONPATH", &dir.path().to_string_lossy(), ":");
            files = Some(dir);
        }
        "ruby" => {
            let dir = tempfile::Builder::new().prefix("sdt-ruby").tempdir()?;
            let file = dir.path().join("sdt_tracepoint.rb");
            std::fs::write(
                &file,
                "# Written by sdt: Ruby fires method__entry and method__return only while a TracePoint for them is enabled.\n$sdt_tracepoint = TracePoint.new(:call, :return) {}\n$sdt_tracepoint.enable\n",
            )?;
            append("RUBYOPT", &format!("-r{}", file.display()), " ");
            files = Some(dir);
        }
        _ => {}
    }
    Ok(Switched { _files: files })
}

/// For a running process (or every process): what the user must do for
/// `probes` to fire, when they wait for a switch that the process's
/// environment or command line does not show on (or cannot show: a
/// profile function, a TracePoint), since sdt cannot switch it on from
/// outside.
pub fn advice(language: &Language, probes: Probes, pid: Option<i32>) -> Option<String> {
    if !probes.switched(language) {
        return None;
    }
    if pid.and_then(|pid| language.switch_seen(pid)) == Some(true) {
        return None;
    }
    Some(format!(
        "{}; sdt switches it on only for a -c command",
        language.switch_sentence()
    ))
}
