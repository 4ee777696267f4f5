//! What sdt knows of the language runtimes whose probes it traces (the
//! JVM, CPython, Ruby, PHP), in one table ([`LANGUAGES`]) that every
//! front end reads: the session layer (`sdt-job`), to say at the start of
//! `sdt run` and `sdt trace` that a program is a runtime built without
//! probes and where one with them is, and at the end that a probe which
//! waits for a switch fired zero times and what the switch is; and the
//! language tools (`sdt-tools`), to find the runtime, fill in their
//! programs and switch the probes on for a `-c` command.
//!
//! A row says, for one runtime:
//!
//! - its USDT provider, and how the tools' programs name and read its
//!   probes (method entry and return, collections, allocations, threads);
//! - which probes fire only while a switch is on, and the switch, in
//!   words a user can act on ([`Switch`]). These were checked on this
//!   project's machines (Debian 12: CPython 3.11, OpenJDK 17, Ruby 3.1,
//!   PHP 8.2), each probe counted with the switch off and on;
//! - where an installed copy keeps its probes ([`Installed`]), so that
//!   sdt can name one that has them ([`installed`], [`with_probes`]);
//! - how a build of one's own gets probes.
//!
//! It reads ELF files (through `sdt-elf`) to tell whether a file has a
//! provider's probes, and nothing else: no process is started and the
//! kernel is not asked anything.

#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use sdt_elf::{ElfFile, FileId};

/// One runtime, and its probes.
#[derive(Debug)]
pub struct Language {
    /// The name given with `-l`.
    pub name: &'static str,
    /// The runtime as sentences name it: "CPython", "the JVM".
    pub title: &'static str,
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
    /// The probes that fire only while a switch is on, and the switch.
    pub switch: Switch,
    /// How a build of one's own gets the probes, for a runtime found
    /// without them.
    pub build: &'static str,
    /// Where an installed runtime keeps its probes.
    pub installed: Installed,
}

/// What a runtime needs before some of its probes fire: a flag it is
/// started with, a variable in its environment, or something the program
/// does. A probe that waits for it and fires zero times is the commonest
/// way a trace shows nothing.
#[derive(Debug)]
pub struct Switch {
    /// The probes that wait for it.
    pub gated: &'static [Gated],
    /// What the runtime does, as the end of a sentence that starts with
    /// its [`title`](Language::title): "fires its method, allocation and
    /// monitor probes only when started with ...".
    pub words: &'static str,
    /// What shows it on in a process's environment or command line
    /// (`/proc/PID/environ`, `/proc/PID/cmdline`), when it can be seen
    /// from outside.
    pub seen_as: Option<&'static str>,
}

/// A probe that fires only while its runtime's [`Switch`] is on.
#[derive(Debug)]
pub struct Gated {
    pub probe: &'static str,
    /// A probe of the same runtime that fires whether or not the switch
    /// is on, and about as often as this one when it is on, for a probe
    /// that also fires, rarely, without the switch: CPython 3.11 fires
    /// `function__entry` without a profile function only when a
    /// generator is thrown into or closed (a handful of times at start-up),
    /// and `function__return` at every return. This probe firing less
    /// than a tenth as often as its companion says that the switch was
    /// off for most of the run. (Not less than half: a profile function
    /// written in Python makes CPython report two returns of it, and no
    /// entry, per call: a quarter as many entries as returns.)
    pub companion: Option<&'static str>,
}

/// The files of an installed runtime that may hold its probes: each is
/// kept only if it has the runtime's provider.
#[derive(Debug)]
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

#[derive(Debug)]
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
#[derive(Debug)]
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

#[derive(Debug)]
pub struct Gc {
    /// The probe at a collection's start, on the collecting thread.
    pub begin: &'static str,
    /// The probe at its end, on the same thread.
    pub end: &'static str,
}

#[derive(Debug)]
pub struct Alloc {
    pub probe: &'static str,
    /// The class's name.
    pub class: &'static str,
}

#[derive(Debug)]
pub struct Threads {
    pub start: &'static str,
    pub stop: &'static str,
    /// The thread's name.
    pub name: &'static str,
    /// The kernel's id of the thread.
    pub id: &'static str,
}

/// A probe that waits for the switch and fires at no other time.
const fn gated(probe: &'static str) -> Gated {
    Gated {
        probe,
        companion: None,
    }
}

pub const LANGUAGES: &[Language] = &[
    Language {
        name: "java",
        title: "the JVM",
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
        // OpenJDK 17, counted with and without the flag: these fire only
        // with it (it sets DTraceMethodProbes, DTraceAllocProbes and
        // DTraceMonitorProbes); class, compiler, thread, GC and JNI
        // probes fire without it.
        switch: Switch {
            gated: &[
                gated("method__entry"),
                gated("method__return"),
                gated("object__alloc"),
                gated("monitor__contended__enter"),
                gated("monitor__contended__entered"),
                gated("monitor__contended__exit"),
                gated("monitor__wait"),
                gated("monitor__waited"),
                gated("monitor__notify"),
                gated("monitor__notifyAll"),
            ],
            words: "fires its method, allocation and monitor probes only when started with -XX:+ExtendedDTraceProbes (or with JAVA_TOOL_OPTIONS=-XX:+ExtendedDTraceProbes in its environment), which a running JVM cannot be given",
            seen_as: Some("ExtendedDTraceProbes"),
        },
        build: "OpenJDK's builds have them (configure --enable-dtrace)",
        installed: Installed {
            // The `java` launcher has no probes; its JDK's libjvm has.
            programs: &[],
            libraries: &["libjvm.so"],
            dirs: &["/usr/lib/jvm/*/lib/server"],
        },
    },
    Language {
        name: "python",
        title: "CPython",
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
        // CPython 3.11: function__entry fires from the interpreter's
        // tracing path, which a profile or trace function turns on (and
        // so does tracing python:line, whose semaphore the interpreter
        // checks there too), and otherwise only when a generator is
        // resumed by throw() or close(). function__return fires at every
        // return; gc, import, audit and line probes need nothing.
        switch: Switch {
            gated: &[Gated {
                probe: "function__entry",
                companion: Some("function__return"),
            }],
            words: "3.11 fires function__entry at every call only while a profile or trace function is set (sys.setprofile, sys.settrace), and otherwise only where a generator is thrown into or closed",
            seen_as: None,
        },
        build: "build it with ./configure --with-dtrace",
        installed: Installed {
            programs: &["python"],
            libraries: &["libpython"],
            dirs: &[],
        },
    },
    Language {
        name: "ruby",
        title: "Ruby",
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
        // Ruby 3.1: method__entry and method__return wait for a
        // TracePoint on :call and :return (method__return fires a few
        // times without one, at non-local exits); cmethod__entry and
        // cmethod__return, object creation, GC, require and raise fire
        // without one.
        switch: Switch {
            gated: &[gated("method__entry"), gated("method__return")],
            words: "fires method__entry and method__return only while a TracePoint for :call and :return is enabled (TracePoint.new(:call, :return) {}.enable)",
            seen_as: None,
        },
        build: "build it with ./configure --enable-dtrace",
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
        title: "PHP",
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
        // PHP 8.2: the function, execute and compile probes wait for
        // USE_ZEND_DTRACE=1; request, error and exception probes do not.
        switch: Switch {
            gated: &[
                gated("function__entry"),
                gated("function__return"),
                gated("execute__entry"),
                gated("execute__return"),
                gated("compile__file__entry"),
                gated("compile__file__return"),
            ],
            words: "fires its function, execute and compile probes only when started with USE_ZEND_DTRACE=1 in its environment",
            seen_as: Some("USE_ZEND_DTRACE=1"),
        },
        build: "build it with ./configure --enable-dtrace",
        installed: Installed {
            // php, php-fpm, php-cgi; libphp is the embed and Apache SAPI.
            programs: &["php"],
            libraries: &["libphp"],
            dirs: &[],
        },
    },
];

/// The runtime `-l NAME` names, or an error that lists them.
pub fn language(name: &str) -> Result<&'static Language, String> {
    LANGUAGES.iter().find(|l| l.name == name).ok_or_else(|| {
        let names: Vec<_> = LANGUAGES.iter().map(|l| l.name).collect();
        format!("unknown language `{name}`: one of {}", names.join(", "))
    })
}

/// The runtime whose provider this is.
pub fn by_provider(provider: &str) -> Option<&'static Language> {
    LANGUAGES.iter().find(|l| l.provider == provider)
}

/// The runtime a program's file name (`python3`, `php-fpm8.2`) says it is.
pub fn by_program_name(name: &str) -> Option<&'static Language> {
    LANGUAGES.iter().find(|l| name.starts_with(l.name))
}

/// The language whose probes `file` has.
pub fn provider_language(file: &ElfFile) -> Option<&'static Language> {
    let probes = file.probes().ok()?;
    LANGUAGES
        .iter()
        .find(|l| probes.iter().any(|p| p.provider == l.provider))
}

/// Every probe whose hits tell whether a switch was on: each gated probe
/// and its companion, as `(provider, name)`, each once.
pub fn switch_probes() -> Vec<(&'static str, &'static str)> {
    let mut probes = Vec::new();
    for language in LANGUAGES {
        for gated in language.switch.gated {
            for name in std::iter::once(gated.probe).chain(gated.companion) {
                if !probes.contains(&(language.provider, name)) {
                    probes.push((language.provider, name));
                }
            }
        }
    }
    probes
}

impl Language {
    /// Whether `probe` (a name, without the provider) waits for the switch.
    pub fn gated(&self, probe: &str) -> Option<&'static Gated> {
        self.switch.gated.iter().find(|g| g.probe == probe)
    }

    /// The sentence that says what the switch is: "the JVM fires its
    /// method, ... probes only when started with ...".
    pub fn switch_sentence(&self) -> String {
        format!("{} {}", self.title, self.switch.words)
    }

    /// Whether `pid`'s environment or command line shows the switch on;
    /// `None` when that cannot be seen from outside (it is something the
    /// program does).
    pub fn switch_seen(&self, pid: i32) -> Option<bool> {
        let needle = self.switch.seen_as?;
        let mut text = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        text.extend(std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default());
        Some(String::from_utf8_lossy(&text).contains(needle))
    }

    /// The file that holds the probes of `program`, a program of this
    /// runtime by its name: `java` → its JDK's `libjvm.so`, which the
    /// launcher loads; any other, the program itself.
    pub fn probe_file(&self, program: &Path) -> Option<PathBuf> {
        if self.name != "java" {
            return Some(program.to_path_buf());
        }
        // JAVA_HOME/bin/java loads JAVA_HOME/lib/server/libjvm.so.
        let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
        let home = real.parent()?.parent()?;
        Some(home.join("lib/server/libjvm.so"))
    }

    /// Says that `file`, which should hold this runtime's probes, has
    /// none, how a build gets them, and names an installed copy that has
    /// them, if there is one: "/x/python3.11 has no python probes: this
    /// python was built without USDT probes (build it with ./configure
    /// --with-dtrace); /usr/bin/python3.11 has them".
    pub fn without_probes(&self, file: &Path) -> String {
        let elsewhere = match with_probes(self, installed(self)).first() {
            Some(other) => format!("; {} has them", other.display()),
            None => String::new(),
        };
        format!(
            "{} has no {} probes: this {} was built without USDT probes ({}){elsewhere}",
            file.display(),
            self.provider,
            self.name,
            self.build
        )
    }

    /// Whether the ELF file at `path` has this runtime's probes.
    pub fn has_probes(&self, path: &Path) -> bool {
        ElfFile::open(path).is_ok_and(|file| has_provider(&file, self.provider))
    }
}

/// Whether `file` has a probe of `provider`.
pub fn has_provider(file: &ElfFile, provider: &str) -> bool {
    file.probes()
        .is_ok_and(|probes| probes.iter().any(|p| p.provider == provider))
}

/// The runtime a program is, by its name, and the file that would hold
/// its probes (see [`Language::probe_file`]).
pub fn by_program(program: &Path) -> Option<(&'static Language, PathBuf)> {
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let name = real.file_name()?.to_string_lossy().into_owned();
    let language = by_program_name(&name)?;
    Some((language, language.probe_file(program)?))
}

/// The files of `language` installed on this machine that may hold its
/// probes (see [`Installed`]), each by its own name (not a link's);
/// [`with_probes`] keeps those that have them.
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
        if let Some(libjvm) =
            sdt_elf::find_in_path("java", &path).and_then(|java| language.probe_file(&java))
        {
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

/// The files that exist, are ELF and have `language`'s probes, each once
/// (a symlink and its target, or `/lib` and `/usr/lib`, are one file).
pub fn with_probes(language: &Language, candidates: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen: HashSet<FileId> = HashSet::new();
    candidates
        .into_iter()
        .filter(|path| {
            let Ok(file) = ElfFile::open(path) else {
                return false;
            };
            has_provider(&file, language.provider) && seen.insert(file.id())
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_are_found_by_name_provider_and_program_name() {
        assert_eq!(language("ruby").unwrap().provider, "ruby");
        let unknown = language("cobol").unwrap_err();
        assert_eq!(
            unknown,
            "unknown language `cobol`: one of java, python, ruby, php"
        );
        assert_eq!(by_provider("hotspot").unwrap().name, "java");
        assert!(by_provider("hotspot_jni").is_none());
        assert_eq!(by_program_name("python3.11").unwrap().name, "python");
        assert_eq!(by_program_name("php-fpm8.2").unwrap().name, "php");
        assert!(by_program_name("bash").is_none());
    }

    #[test]
    fn every_gated_probe_and_companion_is_a_switch_probe_once() {
        let probes = switch_probes();
        assert!(probes.contains(&("python", "function__entry")));
        assert!(probes.contains(&("python", "function__return")));
        assert!(probes.contains(&("hotspot", "object__alloc")));
        assert!(!probes.contains(&("hotspot", "gc__begin")));
        let unique: HashSet<_> = probes.iter().collect();
        assert_eq!(unique.len(), probes.len());
        let python = language("python").unwrap();
        assert_eq!(
            python.gated("function__entry").unwrap().companion,
            Some("function__return")
        );
        assert!(python.gated("function__return").is_none());
    }

    #[test]
    fn java_s_probes_are_in_its_jdk_s_libjvm() {
        let java = language("java").unwrap();
        assert_eq!(
            java.probe_file(Path::new("/nonexistent/jdk/bin/java")),
            Some(PathBuf::from("/nonexistent/jdk/lib/server/libjvm.so"))
        );
        let python = language("python").unwrap();
        assert_eq!(
            python.probe_file(Path::new("/usr/bin/python3")),
            Some(PathBuf::from("/usr/bin/python3"))
        );
    }

    #[test]
    fn switch_sentences_start_with_the_runtime() {
        let php = language("php").unwrap();
        assert!(php
            .switch_sentence()
            .starts_with("PHP fires its function, execute and compile probes only when started with USE_ZEND_DTRACE=1"));
    }
}
