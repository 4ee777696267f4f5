//! SystemTap's `dtrace` command line, for C and C++ builds that run
//! `dtrace -h -s probes.d -o probes.h` and `dtrace -G -s probes.d -o
//! probes.o objects...`.
//!
//! | option | meaning |
//! | --- | --- |
//! | `-h` | write the header |
//! | `-G` | write the object with the semaphores |
//! | `-s FILE` | the provider file |
//! | `-o FILE` | the output; by default the provider file's name with `.h` or `.o`, in the current directory |
//! | `-C` | run the C preprocessor first (`$CPP`, else `cpp`) |
//! | `-I DIR`, `-IDIR`, `-D NAME[=V]`, `-DNAME[=V]` | passed to the preprocessor |
//! | `FILE.o ...` | objects that DTrace's `-G` would patch: accepted and left alone, as SystemTap does |
//! | `-k` | SystemTap keeps its temporary files; sdt makes none: ignored |
//! | `--no-pyparsing`, `--types` | SystemTap's parser choice and an obsolete option: ignored |
//! | `-32`, `-64`, `-fpic`, `-fPIC`, `-x OPT`, `-xOPT` | DTrace options some builds pass: ignored |

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::cpp::Preprocessor;
use crate::{Error, ProviderFile};

/// What to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// `-h`: the C header.
    Header,
    /// `-G`: the object with the semaphores.
    Object,
}

/// A parsed `dtrace` command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    pub output: Output,
    pub source: PathBuf,
    pub out_path: Option<PathBuf>,
    pub preprocessor: Option<Preprocessor>,
    /// Objects named after the options; see the module docs.
    pub objects: Vec<PathBuf>,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Run(Invocation),
    Help,
}

/// How to call `dtrace`.
pub const USAGE: &str = "\
usage: sdt dtrace -h|-G -s FILE.d [-o OUT] [-C [-I DIR] [-D NAME[=VALUE]]] [OBJECTS...]

SystemTap's dtrace command, without Python: for C and C++ builds.
  -h        write a header with a PROVIDER_PROBE(...) macro (sys/sdt.h's
            DTRACE_PROBEn) and a PROVIDER_PROBE_ENABLED() test per probe
  -G        write an object that defines the probes' semaphores
  -s FILE   the provider file (.d)
  -o OUT    where to write (default: FILE's name with .h or .o, here)
  -C        run the C preprocessor ($CPP, else cpp) first, with -I and -D
Accepted and ignored, as SystemTap's dtrace does: objects after -G, -k,
--no-pyparsing, --types, -32, -64, -fpic, -fPIC, -x OPT.
Installed (or linked) as `dtrace`, sdt takes this command line directly.";

impl Request {
    /// Parses the arguments after `dtrace`.
    pub fn parse(args: &[OsString]) -> Result<Request, String> {
        let mut output = None;
        let mut source = None;
        let mut out_path = None;
        let mut cpp = false;
        let mut options = Vec::new();
        let mut objects = Vec::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let text = arg.to_string_lossy();
            let mut value = |name: &str| {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match &*text {
                "-h" | "-G" => {
                    let this = if text == "-h" {
                        Output::Header
                    } else {
                        Output::Object
                    };
                    if output.is_some_and(|o| o != this) {
                        return Err("give -h or -G, not both".into());
                    }
                    output = Some(this);
                }
                "-s" => source = Some(PathBuf::from(value("-s")?)),
                "-o" => out_path = Some(PathBuf::from(value("-o")?)),
                "-C" => cpp = true,
                "-I" | "-D" => {
                    let v = value(&text)?;
                    options.push(format!("{text}{}", v.to_string_lossy()));
                }
                "-x" => {
                    value("-x")?;
                }
                "--help" | "-help" | "-?" => return Ok(Request::Help),
                "-k" | "--no-pyparsing" | "--types" | "-32" | "-64" | "-fpic" | "-fPIC" => {}
                t if t.starts_with("-I") || t.starts_with("-D") => options.push(t.to_string()),
                t if t.starts_with("-x") => {}
                t if t.starts_with('-') && t.len() > 1 => {
                    return Err(format!("unknown option `{t}`"));
                }
                _ => objects.push(PathBuf::from(arg)),
            }
        }
        let output = output.ok_or("give -h (a header) or -G (an object)")?;
        let source = source.ok_or("give the provider file with -s FILE")?;
        Ok(Request::Run(Invocation {
            output,
            source,
            out_path,
            preprocessor: cpp.then_some(Preprocessor { options }),
            objects,
        }))
    }
}

impl Invocation {
    /// Where the output goes.
    pub fn out_path(&self) -> PathBuf {
        if let Some(path) = &self.out_path {
            return path.clone();
        }
        let stem = self.source.file_stem().unwrap_or(self.source.as_os_str());
        let mut name = OsString::from(stem);
        name.push(match self.output {
            Output::Header => ".h",
            Output::Object => ".o",
        });
        PathBuf::from(name)
    }

    /// Reads the provider file and writes the header or the object;
    /// returns where.
    pub fn run(&self) -> Result<PathBuf, Error> {
        let file = match &self.preprocessor {
            Some(cpp) => {
                ProviderFile::parse(&self.source.display().to_string(), cpp.run(&self.source)?)?
            }
            None => ProviderFile::read(&self.source)?,
        };
        let bytes = match self.output {
            Output::Header => file.header().into_bytes(),
            Output::Object => file.semaphores_object().map_err(Error::Object)?,
        };
        let path = self.out_path();
        write(&path, &bytes)?;
        Ok(path)
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Request, String> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        Request::parse(&args)
    }

    #[test]
    fn systemtap_command_lines() {
        let Request::Run(run) = parse(&[
            "-C",
            "-h",
            "-s",
            "src/probes.d",
            "-o",
            "probes.h.tmp",
            "-I",
            "inc",
            "-DX=1",
        ])
        .unwrap() else {
            panic!("not a run")
        };
        assert_eq!(run.output, Output::Header);
        assert_eq!(run.out_path(), PathBuf::from("probes.h.tmp"));
        assert_eq!(run.preprocessor.unwrap().options, ["-Iinc", "-DX=1"]);

        let Request::Run(run) = parse(&[
            "-G", "-64", "-fPIC", "-x", "nolibs", "-s", "a/p.d", "x.o", "y.o", "-k",
        ])
        .unwrap() else {
            panic!("not a run")
        };
        assert_eq!(run.output, Output::Object);
        assert_eq!(run.out_path(), PathBuf::from("p.o"));
        assert_eq!(run.objects, [PathBuf::from("x.o"), PathBuf::from("y.o")]);
        assert_eq!(run.preprocessor, None);
    }

    #[test]
    fn bad_command_lines_say_why() {
        assert!(parse(&["-s", "p.d"]).unwrap_err().contains("-h"));
        assert!(parse(&["-h"]).unwrap_err().contains("-s FILE"));
        assert!(parse(&["-h", "-G", "-s", "p.d"])
            .unwrap_err()
            .contains("not both"));
        assert!(parse(&["-h", "-s"])
            .unwrap_err()
            .contains("-s needs a value"));
        assert!(parse(&["-h", "-q", "-s", "p.d"])
            .unwrap_err()
            .contains("`-q`"));
        assert_eq!(parse(&["--help"]), Ok(Request::Help));
    }
}
