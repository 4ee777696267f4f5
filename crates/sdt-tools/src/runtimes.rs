//! The language runtimes the tools know: where each keeps its probes,
//! what the probes are called, how their arguments read, and what each
//! needs before its probes fire.
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
//!    that embeds `libpython` is found as Python.
//! 2. With `-c`, the command is read without running it ([`sdt_job::launch`]:
//!    `env`, shebangs, `PATH`) down to the ELF program it executes; then
//!    that program's own probes, then those of the libraries it links
//!    (`DT_NEEDED`: `libruby`, an embedded `libpython`), then its name
//!    (`java` → its JDK's `libjvm.so`; a `python*` without probes is
//!    refused as built without them).
//! 3. With `-l LANG`, the user is trusted: every installed object of that
//!    runtime with probes is traced ([`installed`]: programs in `PATH`,
//!    libraries in the library directories, each JDK's `libjvm.so`), plus
//!    what 1 or 2 found, so that a wrapper script that `exec`s the runtime,
//!    or a child process, is traced too.
//! 4. Without `-l`, when 2 ends at a program that is no runtime but the
//!    command named one on the way (`python3`, a pyenv shim), the installed
//!    objects of that runtime are traced, with a note saying so.
//!
//! Otherwise sdt says in one line that it cannot tell, and suggests `-l`.
//! Installed objects without probes, or that do not exist, are skipped.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sdt_elf::{ElfFile, FileId};
use sdt_job::launch::{self, Launch};

/// One runtime's probes.
pub struct Language {
    /// The name given with `-l`.
    pub name: &'static str,
    /// The USDT provider.
    pub provider: &'static str,
    /// Method entry and return, and the expressions of the class (for
    /// Python: the file) and method names in both.
    pub calls: Option<Calls>,
    /// A collection's start and end.
    pub gc: Option<Gc>,
    /// An object's allocation.
    pub alloc: Option<Alloc>,
    /// Thread start and stop.
    pub threads: Option<Threads>,
    /// A class loaded (for `stat`).
    pub class_load: Option<&'static str>,
    /// An exception raised (for `stat`).
    pub exception: Option<&'static str>,
    /// Where an installed runtime keeps its probes.
    pub installed: Installed,
}

/// The files of an installed runtime that may hold its probes: each is
/// kept only if it has the runtime's provider.
pub struct Installed {
    /// Programs in `PATH` whose names start with one of these.
    pub programs: &'static [&'static str],
    /// Libraries (`*.so*`) whose names start with one of these, in the
    /// library directories and in `dirs`.
    pub libraries: &'static [&'static str],
    /// More directories to look in for the libraries; a `*` component
    /// stands for every directory there (`/usr/lib/jvm/*/lib/server`).
    pub dirs: &'static [&'static str],
}

pub struct Calls {
    /// The probe at a method's entry.
    pub entry: &'static str,
    /// The probe at its return.
    pub ret: &'static str,
    /// The class's name, in the language of the tools' programs.
    pub class: &'static str,
    /// The method's name.
    pub method: &'static str,
    /// What identifies the function at both its entry and its return.
    pub frame: Frame,
}

/// What pairs a method's return with its entry: two arguments that point
/// at the function's names and are the same pointers at both probes (the
/// runtime passes the same strings), and how to read the names back from
/// them when the return never comes.
///
/// Checked on the runtimes of this machine: CPython 3.11 passes the
/// cached UTF-8 of the code object's file and name; PHP 8.2 the same
/// function and class name variables at both; OpenJDK 17 pointers into
/// the class's and method's symbols; Ruby 3.1 the file's and the method
/// name's strings, but a new string for the class name at every probe,
/// so Ruby's frames are told apart by file and method.
pub struct Frame {
    /// The two arguments compared, at entry and at return.
    pub ids: [&'static str; 2],
    /// For names that are not NUL-terminated (Java): one value packing
    /// their lengths, kept with the frame.
    pub lengths: Option<&'static str>,
    /// The class's name (for Python and Ruby: the file's) read from `$a`
    /// and `$b`, the two ids kept, and `$lengths`.
    pub class: &'static str,
    /// The method's name, read the same way.
    pub method: &'static str,
}

pub struct Gc {
    /// The probe at a collection's start, on the collecting thread.
    pub begin: &'static str,
    /// The probe at its end, on the same thread.
    pub end: &'static str,
}

pub struct Alloc {
    pub probe: &'static str,
    /// The class's name.
    pub class: &'static str,
}

pub struct Threads {
    pub start: &'static str,
    pub stop: &'static str,
    /// The thread's name.
    pub name: &'static str,
    /// The kernel's id of the thread.
    pub id: &'static str,
}

pub const LANGUAGES: &[Language] = &[
    Language {
        name: "java",
        provider: "hotspot",
        calls: Some(Calls {
            entry: "method__entry",
            ret: "method__return",
            // Java's names have no NUL, and a length given to `str()`
            // counts one: `str(p, len + 1)` reads `len` bytes.
            class: "str(arg1, arg2 + 1)",
            method: "str(arg3, arg4 + 1)",
            frame: Frame {
                ids: ["arg1", "arg3"],
                lengths: Some("(arg2 << 32) | arg4"),
                class: "str($a, ($lengths >> 32) + 1)",
                method: "str($b, ($lengths & 0xffffffff) + 1)",
            },
        }),
        gc: Some(Gc {
            begin: "gc__begin",
            end: "gc__end",
        }),
        alloc: Some(Alloc {
            probe: "object__alloc",
            class: "str(arg1, arg2 + 1)",
        }),
        threads: Some(Threads {
            start: "thread__start",
            stop: "thread__stop",
            name: "str(arg0, arg1 + 1)",
            id: "arg3",
        }),
        class_load: Some("class__loaded"),
        exception: None,
        installed: Installed {
            // The `java` launcher has no probes; its JDK's libjvm has.
            programs: &[],
            libraries: &["libjvm.so"],
            dirs: &["/usr/lib/jvm/*/lib/server"],
        },
    },
    Language {
        name: "python",
        provider: "python",
        calls: Some(Calls {
            entry: "function__entry",
            ret: "function__return",
            class: "str(arg0)",
            method: "str(arg1)",
            frame: Frame {
                ids: ["arg0", "arg1"],
                lengths: None,
                class: "str($a)",
                method: "str($b)",
            },
        }),
        gc: Some(Gc {
            begin: "gc__start",
            end: "gc__done",
        }),
        alloc: None,
        threads: None,
        class_load: None,
        exception: None,
        installed: Installed {
            programs: &["python"],
            libraries: &["libpython"],
            dirs: &[],
        },
    },
    Language {
        name: "ruby",
        provider: "ruby",
        calls: Some(Calls {
            entry: "method__entry",
            ret: "method__return",
            class: "str(arg0)",
            method: "str(arg1)",
            frame: Frame {
                ids: ["arg2", "arg1"],
                lengths: None,
                class: "str($a)",
                method: "str($b)",
            },
        }),
        gc: Some(Gc {
            begin: "gc__mark__begin",
            end: "gc__mark__end",
        }),
        alloc: Some(Alloc {
            probe: "object__create",
            class: "str(arg0)",
        }),
        threads: None,
        class_load: None,
        exception: Some("raise"),
        installed: Installed {
            // Debian's `ruby` links libruby, which has the probes; a
            // static build has them in the program.
            programs: &["ruby"],
            libraries: &["libruby"],
            dirs: &[],
        },
    },
    Language {
        name: "php",
        provider: "php",
        calls: Some(Calls {
            entry: "function__entry",
            ret: "function__return",
            class: "str(arg3)",
            method: "str(arg0)",
            frame: Frame {
                ids: ["arg3", "arg0"],
                lengths: None,
                class: "str($a)",
                method: "str($b)",
            },
        }),
        gc: None,
        alloc: None,
        threads: None,
        class_load: None,
        exception: Some("exception__thrown"),
        installed: Installed {
            // php, php-fpm, php-cgi; libphp is the embed and Apache SAPI.
            programs: &["php"],
            libraries: &["libphp"],
            dirs: &[],
        },
    },
];

pub fn language(name: &str) -> anyhow::Result<&'static Language> {
    LANGUAGES.iter().find(|l| l.name == name).ok_or_else(|| {
        let names: Vec<_> = LANGUAGES.iter().map(|l| l.name).collect();
        anyhow::anyhow!("unknown language `{name}`: one of {}", names.join(", "))
    })
}

/// Which of a runtime's probes a tool uses, which decides what must be
/// switched on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probes {
    /// Method entry and return ([`Calls`]): off by default in every
    /// runtime.
    Methods,
    /// A collection's start and end ([`Gc`]): always on.
    Collections,
    /// Allocations ([`Alloc`]): off by default in Java (Ruby's
    /// `object__create` always fires).
    Allocations,
    /// Thread start and stop ([`Threads`]): always on.
    Threads,
}

/// The placeholders a tool's program names `language`'s `probes` by,
/// attached in each of `objects`; an error if the runtime has no such
/// probes.
///
/// | probes | placeholders |
/// | --- | --- |
/// | methods | `ENTRY`, `RETURN` (attach points), `CLASS`, `METHOD` (expressions) |
/// | collections | `BEGIN`, `END` |
/// | allocations | `ALLOC`, `CLASS` |
/// | threads | `START`, `STOP`, `ID`, `NAME` |
pub fn placeholders(
    language: &Language,
    probes: Probes,
    objects: &[PathBuf],
) -> anyhow::Result<Vec<(&'static str, String)>> {
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
        .map(|(name, probe)| (name, attach_points(language, objects, probe)));
    let expressions = expressions
        .into_iter()
        .map(|(name, e)| (name, e.to_string()));
    Ok(probes.chain(expressions).collect())
}

/// The attach points of `language`'s probe `name` in each of `objects`,
/// for one probe block.
pub fn attach_points(language: &Language, objects: &[PathBuf], name: &str) -> String {
    let points: Vec<String> = objects
        .iter()
        .map(|object| format!("usdt:{}:{}:{name}", object.display(), language.provider))
        .collect();
    points.join(",\n")
}

/// The runtime found, and the files that hold its probes.
pub struct Detected {
    pub language: &'static Language,
    /// Each file once (by device and inode), in the order found.
    pub objects: Vec<PathBuf>,
}

/// What a `-p` process or a `-c` command was found to run.
enum Found {
    /// A runtime, and the file with its probes (which may have none:
    /// [`check_probes`] says so).
    Object(&'static Language, PathBuf),
    /// A program named like a runtime that is not one itself (a shim):
    /// which runtime it starts is known, not which file.
    Named(&'static Language, String),
    /// No runtime: what was found instead, for the message.
    Unknown(String),
}

/// Finds the runtime of the `-p` process or of the `-c` command, and the
/// files to attach to; see the module documentation for the rules. With
/// neither, `-l` names the runtime and every installed copy is traced.
pub fn detect(
    lang: Option<&str>,
    pid: Option<i32>,
    command: Option<&str>,
) -> anyhow::Result<Detected> {
    let wanted = lang.map(language).transpose()?;
    let found = match (pid, command) {
        (Some(pid), _) => Some(from_process(pid)?),
        (None, Some(command)) => Some(from_command(command)?),
        (None, None) => None,
    };
    let Some(language) = wanted else {
        return match found {
            Some(Found::Object(language, object)) => {
                check_probes(language, &object)?;
                Ok(Detected {
                    language,
                    objects: vec![object],
                })
            }
            Some(Found::Named(language, name)) => {
                let objects = with_probes(language, installed(language));
                if objects.is_empty() {
                    anyhow::bail!("`{name}` is not itself a {} runtime sdt can read, and no {} with probes is installed", language.name, language.name);
                }
                eprintln!(
                    "sdt: note: `{name}` is not the {} runtime itself (a shim or a script); tracing every {} with probes installed: {}",
                    language.name,
                    language.name,
                    list(&objects)
                );
                Ok(Detected { language, objects })
            }
            Some(Found::Unknown(what)) => anyhow::bail!(
                "cannot tell which runtime to trace: {what}; name it with -l LANG (java, python, ruby, php) and sdt traces it wherever it runs in the {}",
                if pid.is_some() { "process's tree" } else { "command's process tree" }
            ),
            None => anyhow::bail!("give the language with -l LANG (java, python, ruby, php), a process with -p PID or a command with -c CMD"),
        };
    };
    // -l: trust the user.
    let mut objects = Vec::new();
    match found {
        Some(Found::Object(found, object)) if found.name == language.name => {
            check_probes(language, &object)?;
            objects.push(object);
        }
        Some(Found::Object(other, _) | Found::Named(other, _)) if other.name != language.name => {
            eprintln!(
                "sdt: note: the traced program runs {}; tracing {} wherever it runs in its process tree",
                other.name, language.name
            );
        }
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
    Ok(Detected { language, objects })
}

/// The paths, for messages.
pub fn list(objects: &[PathBuf]) -> String {
    let names: Vec<String> = objects.iter().map(|o| o.display().to_string()).collect();
    names.join(", ")
}

/// The language whose probes `file` has.
fn provider_language(file: &ElfFile) -> Option<&'static Language> {
    let probes = file.probes().ok()?;
    LANGUAGES
        .iter()
        .find(|l| probes.iter().any(|p| p.provider == l.provider))
}

/// The language a program's name says it is, and the file that would
/// hold its probes: `java` → its JDK's libjvm, any other the program.
fn by_name(program: &Path) -> Option<(&'static Language, PathBuf)> {
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let name = real.file_name()?.to_string_lossy().into_owned();
    let language = name_language(&name)?;
    if language.name == "java" {
        // JAVA_HOME/bin/java loads JAVA_HOME/lib/server/libjvm.so.
        let home = real.parent()?.parent()?;
        return Some((language, home.join("lib/server/libjvm.so")));
    }
    Some((language, program.to_path_buf()))
}

/// The language a program name (`python3`, `php-fpm8.2`) stands for.
fn name_language(name: &str) -> Option<&'static Language> {
    LANGUAGES.iter().find(|l| name.starts_with(l.name))
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
    Ok(match by_name(&exe) {
        Some((language, object)) => Found::Object(language, in_root(&object)),
        None => Found::Unknown(format!(
            "process {pid} runs {}, which maps no runtime's probes",
            exe.display()
        )),
    })
}

/// The runtime a command starts, read without running it.
fn from_command(command: &str) -> anyhow::Result<Found> {
    let launch = launch::read(command)?;
    if launch.clears_environment {
        eprintln!("sdt: note: `env -i` starts the program without the environment through which sdt switches its probes on");
    }
    if let Some(found) = launch
        .program
        .as_deref()
        .and_then(|p| from_program(p, &launch))
    {
        // Named by its own path, not a link to it (`python3`).
        return Ok(match found {
            Found::Object(language, object) => {
                Found::Object(language, std::fs::canonicalize(&object).unwrap_or(object))
            }
            other => other,
        });
    }
    if let Some((name, language)) = launch
        .names
        .iter()
        .find_map(|n| Some((n, name_language(n)?)))
    {
        return Ok(Found::Named(language, name.clone()));
    }
    let chain: Vec<String> = launch
        .files
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    Ok(Found::Unknown(match chain.as_slice() {
        [] => "the command runs no program".to_string(),
        [one] => format!("the command starts {one}, not a runtime sdt knows"),
        [first, .., last] => {
            format!("the command starts {first}, run by {last}, not a runtime sdt knows")
        }
    }))
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
    by_name(program).map(|(language, object)| Found::Object(language, object))
}

/// The files of `language` installed on this machine that may hold its
/// probes (see [`Installed`]); `with_probes` keeps those that do.
pub fn installed(language: &Language) -> Vec<PathBuf> {
    let wanted = &language.installed;
    let mut found = Vec::new();
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        found.extend(
            names_in(&dir)
                .filter(|n| wanted.programs.iter().any(|p| n.starts_with(p)))
                .map(|n| dir.join(n)),
        );
    }
    let mut dirs = sdt_elf::library_dirs();
    for pattern in wanted.dirs {
        dirs.extend(expand(pattern));
    }
    // A `java` in PATH names its own JDK, wherever it is installed.
    if language.name == "java" {
        if let Some((_, libjvm)) = sdt_elf::find_in_path("java", &path).and_then(|j| by_name(&j)) {
            found.push(libjvm);
        }
    }
    for dir in dirs {
        found.extend(
            names_in(&dir)
                .filter(|n| n.contains(".so") && wanted.libraries.iter().any(|p| n.starts_with(p)))
                .map(|n| dir.join(n)),
        );
    }
    // Each by its own name, not a link's (`python3`, `/lib` for `/usr/lib`).
    found
        .into_iter()
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .collect()
}

/// The file names in a directory, sorted; none if it cannot be read.
fn names_in(dir: &Path) -> impl Iterator<Item = String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names.into_iter()
}

/// The directories a pattern with one `*` component names.
fn expand(pattern: &str) -> Vec<PathBuf> {
    let Some((parent, rest)) = pattern.split_once("/*/") else {
        return vec![PathBuf::from(pattern)];
    };
    names_in(Path::new(parent))
        .map(|n| Path::new(parent).join(n).join(rest))
        .filter(|p| p.is_dir())
        .collect()
}

/// The files that exist, are ELF and have `language`'s probes, each once
/// (a symlink and its target, or `/lib` and `/usr/lib`, are one file).
fn with_probes(language: &Language, candidates: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen: HashSet<FileId> = HashSet::new();
    candidates
        .into_iter()
        .filter(|path| {
            let Ok(file) = ElfFile::open(path) else {
                return false;
            };
            let has_probes = file
                .probes()
                .is_ok_and(|probes| probes.iter().any(|p| p.provider == language.provider));
            has_probes && seen.insert(file.id())
        })
        .collect()
}

/// A runtime built without probes gets a one-line error.
fn check_probes(language: &Language, object: &Path) -> anyhow::Result<()> {
    let provider = language.provider;
    let file =
        ElfFile::open(object).with_context(|| format!("cannot open {}", object.display()))?;
    let probes = file.probes()?;
    if !probes.iter().any(|p| p.provider == provider) {
        anyhow::bail!(
            "{} has no {provider} probes: this {} was built without USDT probes (configure it with --enable-dtrace or --with-dtrace)",
            object.display(),
            language.name
        );
    }
    Ok(())
}

/// What is done before the `-c` command starts so that its probes fire,
/// through its environment; kept alive until the command ends.
pub struct Switched {
    /// Files the environment points at.
    _files: Option<tempfile::TempDir>,
}

/// Switches the probes on for the `-c` command to come, through the
/// environment it inherits:
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
    let append = |var: &str, value: &str, separator: &str| {
        let new = match std::env::var(var) {
            Ok(old) if !old.is_empty() => format!("{value}{separator}{old}"),
            _ => value.to_string(),
        };
        std::env::set_var(var, new);
    };
    let mut files = None;
    match (language.name, probes) {
        ("php", _) => std::env::set_var("USE_ZEND_DTRACE", "1"),
        ("java", Probes::Methods | Probes::Allocations) => {
            append("JAVA_TOOL_OPTIONS", "-XX:+ExtendedDTraceProbes", " ")
        }
        ("python", Probes::Methods) => {
            let dir = tempfile::Builder::new().prefix("sdt-python").tempdir()?;
            std::fs::write(
                dir.path().join("sitecustomize.py"),
                "# Written by sdt: CPython fires function__entry only while a profile function is set.\nimport sys, threading\nsys.setprofile(slice)\nthreading.setprofile(slice)\n",
            )?;
            append("PYTHONPATH", &dir.path().to_string_lossy(), ":");
            files = Some(dir);
        }
        ("ruby", Probes::Methods) => {
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

/// For a running process (or every process): whether its probes are
/// likely off, and what the user must do, since sdt cannot switch them on
/// from outside.
pub fn advice(language: &Language, probes: Probes, pid: Option<i32>) -> Option<String> {
    let environ = |pid: i32| {
        let mut text = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        text.extend(std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default());
        String::from_utf8_lossy(&text).into_owned()
    };
    let seen = |needle: &str| pid.is_some_and(|p| environ(p).contains(needle));
    match (language.name, probes) {
        ("java", Probes::Methods | Probes::Allocations) if !seen("ExtendedDTraceProbes") => Some(
            "Java fires method and allocation probes only when started with -XX:+ExtendedDTraceProbes (or JAVA_TOOL_OPTIONS=-XX:+ExtendedDTraceProbes); the flag cannot be set in a running JVM".into(),
        ),
        ("php", _) if !seen("USE_ZEND_DTRACE=1") => Some(
            "PHP fires its probes only when started with USE_ZEND_DTRACE=1 in its environment".into(),
        ),
        ("python", Probes::Methods) => Some(
            "CPython 3.11 fires function__entry only while a profile or trace function is set (sys.setprofile); sdt sets one only for the -c command".into(),
        ),
        ("ruby", Probes::Methods) => Some(
            "Ruby fires method__entry and method__return only while a TracePoint for them is enabled (TracePoint.new(:call, :return){}.enable); sdt enables one only for the -c command".into(),
        ),
        _ => None,
    }
}
