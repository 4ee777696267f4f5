//! Why a job could not start or run, as data that each front end reports
//! its own way: `sdt run` shows located errors (in bpftrace's words under
//! its name), `sdt serve` one line in its log, `sdt trace` the probe spec
//! a message is about.

use std::process::ExitCode;

use sdt_lang::diag::Diagnostics;
use sdt_lang::getopt::BindError;

use crate::diagnostics::print_diagnostics;
use crate::Voice;

/// Exit status of an error in a script, as bpftrace's.
const EXIT_SCRIPT_ERROR: u8 = 1;

/// Why a job failed.
#[derive(Debug)]
pub enum Failure {
    /// Errors in the script, each placed in `text`, the text compiled
    /// (the script, and whatever a front end added to it), named `name`.
    Script {
        diagnostics: Diagnostics,
        name: String,
        text: String,
    },
    /// A named parameter the program does not take, or `-- --help`.
    Parameters(BindError),
    /// Anything else: a file that cannot be read, a process that has
    /// gone, the kernel refusing.
    Other(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::Other(e)
    }
}

impl Failure {
    pub(crate) fn other(e: impl Into<anyhow::Error>) -> Failure {
        Failure::Other(e.into())
    }

    /// Reports an error about the script on standard error, in `voice`,
    /// and gives bpftrace's exit status for it; anything else is handed
    /// back for the caller's one-line message.
    pub fn report(self, voice: Voice) -> anyhow::Result<ExitCode> {
        match self {
            Failure::Script {
                diagnostics,
                name,
                text,
            } => {
                print_diagnostics(&diagnostics, voice, &name, &text);
                Ok(ExitCode::from(EXIT_SCRIPT_ERROR))
            }
            Failure::Parameters(e) => {
                named_parameter_error(e, voice);
                Ok(ExitCode::from(EXIT_SCRIPT_ERROR))
            }
            Failure::Other(e) => Err(e),
        }
    }

    /// The failure in one line, `FILE:LINE:COLUMN: error: MESSAGE` for
    /// the script's first error, for a log.
    pub fn one_line(&self) -> String {
        match self {
            Failure::Script {
                diagnostics,
                name,
                text,
            } => {
                let first = diagnostics.0.first();
                let (line, column) = first.map_or((0, 0), |d| d.line_column(text));
                let message = first.map_or_else(|| diagnostics.to_string(), |d| d.message.clone());
                format!("{name}:{line}:{column}: error: {message}")
            }
            Failure::Parameters(e) => format!("{e:?}"),
            Failure::Other(e) => {
                let text = format!("{e:#}");
                let mut lines = text.lines().filter(|l| !l.trim().is_empty());
                let first = lines.next().unwrap_or("").trim().to_string();
                match lines.count() {
                    0 => first,
                    more => {
                        format!("{first} (and {more} more lines; `sdt run` on the file shows them)")
                    }
                }
            }
        }
    }

    /// Errors in a program sdt made itself (from a probe spec or a
    /// tool's options): each message with its hints, without the program
    /// text the user never wrote.
    pub fn without_script(self) -> anyhow::Error {
        match self {
            Failure::Script { diagnostics, .. } => {
                let lines: Vec<String> = diagnostics
                    .0
                    .iter()
                    .map(|d| {
                        std::iter::once(d.message.clone())
                            .chain(d.hints.iter().cloned())
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                    .collect();
                anyhow::anyhow!("{}", lines.join("\n"))
            }
            Failure::Parameters(e) => anyhow::anyhow!("{e:?}"),
            Failure::Other(e) => e,
        }
    }
}

/// Reports a named parameter the program does not take, or `--help`.
fn named_parameter_error(e: BindError, voice: Voice) {
    let prefix = |kind: &str| match voice {
        Voice::Bpftrace => format!("{}: ", kind.to_ascii_uppercase()),
        Voice::Sdt => format!("sdt: {kind}: "),
    };
    match e {
        BindError::Help(options) if options.is_empty() => {
            eprintln!("{}no custom program options defined.", prefix("hint"));
        }
        BindError::Help(options) => {
            eprintln!("{}expected program options:", prefix("hint"));
            for option in options {
                eprintln!("{option}");
            }
        }
        BindError::Unexpected {
            unexpected,
            expected,
        } => {
            let list = |names: &[String]| {
                names
                    .iter()
                    .map(|n| format!("--{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            eprintln!(
                "{}unexpected program command line options: {}",
                prefix("error"),
                list(&unexpected)
            );
            if expected.is_empty() {
                eprintln!("{}no custom program options defined.", prefix("hint"));
            } else {
                eprintln!(
                    "{}expected program options: {}",
                    prefix("hint"),
                    list(&expected)
                );
            }
        }
        BindError::Invalid(why) => eprintln!("{}{why}", prefix("error")),
    }
}
