//! The language runtimes the tools know: where each keeps its probes,
//! what the probes are called, how their arguments read, and what each
//! needs before its probes fire.
//!
//! One table drives every tool: a tool's program names probes and
//! arguments through placeholders (`{{ENTRY}}`, `{{CLASS}}`, ...) that the
//! row of the traced language fills in.

use std::path::{Path, PathBuf};

use anyhow::Context;

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
            class: "str(arg1, arg2)",
            method: "str(arg3, arg4)",
        }),
        gc: Some(Gc {
            begin: "gc__begin",
            end: "gc__end",
        }),
        alloc: Some(Alloc {
            probe: "object__alloc",
            class: "str(arg1, arg2)",
        }),
        threads: Some(Threads {
            start: "thread__start",
            stop: "thread__stop",
            name: "str(arg0, arg1)",
            id: "arg3",
        }),
        class_load: Some("class__loaded"),
        exception: None,
    },
    Language {
        name: "python",
        provider: "python",
        calls: Some(Calls {
            entry: "function__entry",
            ret: "function__return",
            class: "str(arg0)",
            method: "str(arg1)",
        }),
        gc: Some(Gc {
            begin: "gc__start",
            end: "gc__done",
        }),
        alloc: None,
        threads: None,
        class_load: None,
        exception: None,
    },
    Language {
        name: "ruby",
        provider: "ruby",
        calls: Some(Calls {
            entry: "method__entry",
            ret: "method__return",
            class: "str(arg0)",
            method: "str(arg1)",
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
    },
    Language {
        name: "php",
        provider: "php",
        calls: Some(Calls {
            entry: "function__entry",
            ret: "function__return",
            class: "str(arg3)",
            method: "str(arg0)",
        }),
        gc: None,
        alloc: None,
        threads: None,
        class_load: None,
        exception: Some("exception__thrown"),
    },
];

pub fn language(name: &str) -> anyhow::Result<&'static Language> {
    LANGUAGES.iter().find(|l| l.name == name).ok_or_else(|| {
        let names: Vec<_> = LANGUAGES.iter().map(|l| l.name).collect();
        anyhow::anyhow!("unknown language `{name}`: one of {}", names.join(", "))
    })
}

/// Which probes a tool uses, for what must be switched on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Method entry and return: off by default in every runtime.
    MethodProbes,
    /// Allocations: off by default in Java (Ruby's `object__create`
    /// always fires).
    Allocations,
    /// Probes that fire on their own (collections, threads).
    Plain,
}

/// The runtime found, and the file that holds its probes.
pub struct Detected {
    pub language: &'static Language,
    pub object: PathBuf,
}

/// Finds the runtime of the `-p` process, of the `-c` command, or, with
/// neither, the one `-l` names as installed on this machine.
pub fn detect(
    lang: Option<&str>,
    pid: Option<i32>,
    command: Option<&str>,
) -> anyhow::Result<Detected> {
    let wanted = lang.map(language).transpose()?;
    let found = if let Some(pid) = pid {
        from_process(pid)?
    } else if let Some(command) = command {
        let argv = shlex::split(command).unwrap_or_default();
        let program = sdt_elf::resolve(argv.first().map_or("", String::as_str))?;
        from_program(&program)
    } else {
        let Some(language) = wanted else {
            anyhow::bail!("give the language with -l LANG (java, python, ruby, php), a process with -p PID or a command with -c CMD");
        };
        let program = sdt_elf::resolve(default_program(language))
            .with_context(|| format!("no {} installed", language.name))?;
        from_program(&program)
    };
    let detected = match (found, wanted) {
        (Some(found), Some(wanted)) if found.language.name != wanted.name => anyhow::bail!(
            "the traced program runs {}, not {}",
            found.language.name,
            wanted.name
        ),
        (Some(found), _) => found,
        (None, Some(wanted)) => anyhow::bail!(
            "cannot find the {} runtime's probe library in the traced program",
            wanted.name
        ),
        (None, None) => anyhow::bail!(
            "the traced program is not a runtime sdt knows (java, python, ruby, php); name it with -l LANG"
        ),
    };
    check_probes(&detected)?;
    Ok(detected)
}

fn default_program(language: &Language) -> &'static str {
    match language.name {
        "java" => "java",
        "python" => "python3",
        "ruby" => "ruby",
        _ => "php",
    }
}

/// The runtime a program is: by its name, with its probes in the program
/// itself or in the library it loads.
fn from_program(program: &Path) -> Option<Detected> {
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let name = real.file_name()?.to_string_lossy().into_owned();
    let (language, object) = if name.starts_with("java") {
        // JAVA_HOME/bin/java loads JAVA_HOME/lib/server/libjvm.so.
        let home = real.parent()?.parent()?;
        ("java", home.join("lib/server/libjvm.so"))
    } else if name.starts_with("python") {
        ("python", real.clone())
    } else if name.starts_with("ruby") {
        (
            "ruby",
            shared_library("libruby", &real).unwrap_or(real.clone()),
        )
    } else if name.starts_with("php") {
        ("php", real.clone())
    } else {
        return None;
    };
    Some(Detected {
        language: language_named(language),
        object,
    })
}

/// The newest `PREFIX*.so*` in the program's `../lib` or the system's
/// library directories: where Debian and source builds put `libruby`.
fn shared_library(prefix: &str, program: &Path) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = program
        .parent()
        .and_then(Path::parent)
        .map(|p| p.join("lib"))
        .into_iter()
        .collect();
    let multiarch = format!("{}-linux-gnu", std::env::consts::ARCH);
    dirs.extend(
        [
            format!("/usr/lib/{multiarch}"),
            format!("/lib/{multiarch}"),
            "/usr/lib64".into(),
            "/usr/lib".into(),
            "/usr/local/lib".into(),
        ]
        .map(PathBuf::from),
    );
    dirs.iter().find_map(|dir| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(prefix) && n.contains(".so"))
            .collect();
        names.sort();
        names.pop().map(|n| dir.join(n))
    })
}

fn language_named(name: &str) -> &'static Language {
    LANGUAGES
        .iter()
        .find(|l| l.name == name)
        .unwrap_or(&LANGUAGES[0])
}

/// The runtime of a running process: from the libraries it maps, else
/// from its program.
fn from_process(pid: i32) -> anyhow::Result<Option<Detected>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("cannot read the mappings of process {pid}"))?;
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        let file = Path::new(path).file_name().map(|n| n.to_string_lossy());
        let language = match file.as_deref() {
            Some(f) if f.starts_with("libjvm.so") => "java",
            Some(f) if f.starts_with("libpython3") => "python",
            Some(f) if f.starts_with("libruby") => "ruby",
            _ => continue,
        };
        let object = root.join(path.trim_start_matches('/'));
        return Ok(Some(Detected {
            language: language_named(language),
            object,
        }));
    }
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .with_context(|| format!("cannot read the program of process {pid}"))?;
    Ok(from_program(&exe).map(|d| Detected {
        object: if d.object == exe {
            root.join(exe.to_string_lossy().trim_start_matches('/'))
        } else {
            d.object
        },
        ..d
    }))
}

/// A runtime built without probes gets a one-line error.
fn check_probes(detected: &Detected) -> anyhow::Result<()> {
    let provider = detected.language.provider;
    let file = sdt_elf::ElfFile::open(&detected.object)
        .with_context(|| format!("cannot open {}", detected.object.display()))?;
    let probes = file.probes()?;
    if !probes.iter().any(|p| p.provider == provider) {
        anyhow::bail!(
            "{} has no {provider} probes: this {} was built without USDT probes (configure it with --enable-dtrace or --with-dtrace)",
            detected.object.display(),
            detected.language.name
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
pub fn switch_on(language: &Language, needs: Needs) -> anyhow::Result<Switched> {
    let append = |var: &str, value: &str, separator: &str| {
        let new = match std::env::var(var) {
            Ok(old) if !old.is_empty() => format!("{value}{separator}{old}"),
            _ => value.to_string(),
        };
        std::env::set_var(var, new);
    };
    let mut files = None;
    match (language.name, needs) {
        ("php", _) => std::env::set_var("USE_ZEND_DTRACE", "1"),
        ("java", Needs::MethodProbes | Needs::Allocations) => {
            append("JAVA_TOOL_OPTIONS", "-XX:+ExtendedDTraceProbes", " ")
        }
        ("python", Needs::MethodProbes) => {
            let dir = tempfile::Builder::new().prefix("sdt-python").tempdir()?;
            std::fs::write(
                dir.path().join("sitecustomize.py"),
                "# Written by sdt: CPython fires function__entry only while a profile function is set.\nimport sys, threading\nsys.setprofile(slice)\nthreading.setprofile(slice)\n",
            )?;
            append("PYTHONPATH", &dir.path().to_string_lossy(), ":");
            files = Some(dir);
        }
        ("ruby", Needs::MethodProbes) => {
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
pub fn advice(language: &Language, needs: Needs, pid: Option<i32>) -> Option<String> {
    let environ = |pid: i32| {
        let mut text = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        text.extend(std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default());
        String::from_utf8_lossy(&text).into_owned()
    };
    let seen = |needle: &str| pid.is_some_and(|p| environ(p).contains(needle));
    match (language.name, needs) {
        ("java", Needs::MethodProbes | Needs::Allocations) if !seen("ExtendedDTraceProbes") => Some(
            "Java fires method and allocation probes only when started with -XX:+ExtendedDTraceProbes (or JAVA_TOOL_OPTIONS=-XX:+ExtendedDTraceProbes); the flag cannot be set in a running JVM".into(),
        ),
        ("php", _) if !seen("USE_ZEND_DTRACE=1") => Some(
            "PHP fires its probes only when started with USE_ZEND_DTRACE=1 in its environment".into(),
        ),
        ("python", Needs::MethodProbes) => Some(
            "CPython 3.11 fires function__entry only while a profile or trace function is set (sys.setprofile); sdt sets one only for the -c command".into(),
        ),
        ("ruby", Needs::MethodProbes) => Some(
            "Ruby fires method__entry and method__return only while a TracePoint for them is enabled (TracePoint.new(:call, :return){}.enable); sdt enables one only for the -c command".into(),
        ),
        _ => None,
    }
}
