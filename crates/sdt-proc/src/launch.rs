//! What a `-c` command starts, read from the command line and the files
//! it names, without running anything.
//!
//! The first word of a command is often not the program whose probes
//! matter: `env USE_ZEND_DTRACE=1 php8.2 app.php`, `./manage.py` (whose
//! first line is `#!/usr/bin/env python3`), `env -S 'ruby -w'` in a
//! shebang. This follows what the kernel and `execvp` would do, step by
//! step:
//!
//! - `env` is skipped with its options and `NAME=VALUE` assignments;
//!   `-S STRING` is split into words, as `env` splits it;
//! - a bare name is looked up in `PATH` (the assigned one, if `env` sets
//!   it) as `execvp` does: the first executable file, ELF or script;
//! - a file that starts with `#!` runs its interpreter, with the line's
//!   one optional argument, then the file;
//! - any other file that is not ELF runs under `/bin/sh`, as `execvp`
//!   runs it;
//!
//! until an ELF program is reached: the program whose probes a probe
//! without a file means under `sdt run -c` and `sdt trace -c`, and where
//! the language tools look for a runtime. What happens after that program
//! starts (a shell script's `exec`, a child process) is not seen here: for
//! those the user names the file, or the runtime with `-l`.
//!
//! It lives with process control because it is the other half of starting
//! the command: [`crate::HeldChild`] runs what this reads.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::Error;

/// Programs that run scripts which may run anything, decided when they
/// run: shells.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"];

/// The kernel follows at most 4 nested interpreters; `env` adds a step.
const MAX_STEPS: usize = 10;

/// What a command line starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launch {
    /// The ELF program it executes in the end, if it could be followed to
    /// one.
    pub program: Option<PathBuf>,
    /// The name of each program and interpreter on the way, in order
    /// (`python3` for `#!/usr/bin/env python3`): what the user or the
    /// script asked for, which a shim may stand in for.
    pub names: Vec<String>,
    /// The files read on the way (scripts, then the program), for
    /// messages.
    pub files: Vec<PathBuf>,
    /// `NAME=VALUE` assignments made by `env`.
    pub assignments: Vec<(String, String)>,
    /// `env -i`: the program starts with an empty environment (so without
    /// what sdt sets in it to switch probes on).
    pub clears_environment: bool,
}

impl Launch {
    /// The value `NAME` has in the program's environment, as far as the
    /// command line tells.
    pub fn var(&self, name: &str) -> Option<OsString> {
        if let Some((_, value)) = self.assignments.iter().rev().find(|(n, _)| n == name) {
            return Some(value.into());
        }
        if self.clears_environment {
            return None;
        }
        std::env::var_os(name)
    }

    /// The script the command runs through a shell, when its program is
    /// one: a shim (pyenv's, rbenv's) or a wrapper script, which decides
    /// what it runs only when it runs. Its name as asked for and its file
    /// (see [`last_script`](Self::last_script)).
    pub fn wrapper(&self) -> Option<(&str, &Path)> {
        let program = self.program.as_deref()?.file_name()?.to_str()?;
        SHELLS.contains(&program).then(|| self.last_script())?
    }

    /// The script the program runs, when the command reaches its program
    /// through one (a `#!` line, or a file without one, which `/bin/sh`
    /// runs): the name the script was asked for by (`python3.11` for
    /// `#!/usr/bin/env python3.11`) and its file. Such a program may be
    /// only a step: a shim or a wrapper script decides what it runs only
    /// when it runs, which nothing here can read.
    pub fn last_script(&self) -> Option<(&str, &Path)> {
        self.program.as_ref()?;
        let n = self.files.len().checked_sub(2)?;
        Some((self.names.get(n)?.as_str(), self.files[n].as_path()))
    }
}

/// Reads what `command` starts; fails when the command cannot be split
/// into words or names a program that does not exist or cannot be read.
pub fn read(command: &str) -> Result<Launch, Error> {
    let Some(mut argv) = shlex::split(command) else {
        return Err(Error::BadCommand(command.to_string()));
    };
    let mut launch = Launch::default();
    for _ in 0..MAX_STEPS {
        if argv.first().is_some_and(|w| base_name(w) == "env") {
            argv = skip_env(&argv[1..], &mut launch);
        }
        let Some(word) = argv.first().cloned() else {
            // `env` alone prints the environment; nothing runs.
            return Ok(launch);
        };
        launch.names.push(base_name(&word).to_string());
        let not_runnable = |why: String| Error::NotRunnable {
            program: word.clone(),
            why,
        };
        let path = find_program(&word, launch.var("PATH")).ok_or_else(|| {
            not_runnable(if word.contains('/') {
                "no such file".into()
            } else {
                "not found in PATH".into()
            })
        })?;
        launch.files.push(path.clone());
        let head = head(&path).map_err(|e| not_runnable(format!("cannot read it: {e}")))?;
        let rest = argv[1..].iter().cloned();
        if head.starts_with(b"\x7fELF") {
            launch.program = Some(path);
            return Ok(launch);
        }
        let mut next: Vec<String> = match shebang(&head) {
            Some((interpreter, argument)) => std::iter::once(interpreter).chain(argument).collect(),
            None => vec!["/bin/sh".to_string()],
        };
        next.push(path.to_string_lossy().into_owned());
        next.extend(rest);
        argv = next;
    }
    Ok(launch)
}

/// The words after `env`'s options and assignments (`args` starts after
/// `env` itself), recording what they do to the environment.
fn skip_env(args: &[String], launch: &mut Launch) -> Vec<String> {
    let mut words: Vec<String> = args.to_vec();
    let mut i = 0;
    let mut options = true;
    while i < words.len() {
        let word = words[i].clone();
        if options && word.starts_with('-') && word != "-" {
            match word.as_str() {
                "--" => options = false,
                "-i" | "--ignore-environment" => launch.clears_environment = true,
                // Options that take the next word as their value.
                "-u" | "--unset" | "-C" | "--chdir" => i += 1,
                "-S" | "--split-string" => {
                    // The next word is itself a command line.
                    let split = words
                        .get(i + 1)
                        .and_then(|s| shlex::split(s))
                        .unwrap_or_default();
                    let end = (i + 2).min(words.len());
                    words.splice(i..end, split);
                    continue;
                }
                _ => {
                    if let Some(text) = word
                        .strip_prefix("--split-string=")
                        .or_else(|| word.strip_prefix("-S").filter(|t| !t.is_empty()))
                    {
                        let split = shlex::split(text).unwrap_or_default();
                        words.splice(i..i + 1, split);
                        continue;
                    }
                    // Any other option (`-0`, `-v`, `--unset=NAME`,
                    // `-uNAME`) stands alone.
                }
            }
            i += 1;
            continue;
        }
        if word == "-" {
            launch.clears_environment = true;
            i += 1;
            continue;
        }
        match word.split_once('=') {
            Some((name, value)) if !name.is_empty() && !name.contains('/') => {
                launch
                    .assignments
                    .push((name.to_string(), value.to_string()));
                i += 1;
            }
            _ => break,
        }
    }
    words.split_off(i.min(words.len()))
}

/// The program `execvp` runs for `word`: a path as it is, a bare name as
/// the first executable regular file of that name in `path` (a script
/// too).
fn find_program(word: &str, path: Option<OsString>) -> Option<PathBuf> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if word.contains('/') {
        let path = PathBuf::from(word);
        return path.is_file().then_some(path);
    }
    if word.is_empty() {
        return None;
    }
    let path = path.unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(word))
        .find(|p| executable(p))
}

/// The first bytes of a file: enough for the ELF magic and a `#!` line.
fn head(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(256);
    std::fs::File::open(path)?
        .take(256)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The interpreter of a `#!` line and its one optional argument (Linux
/// passes everything after the interpreter's name as a single argument).
fn shebang(head: &[u8]) -> Option<(String, Option<String>)> {
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let line = String::from_utf8_lossy(line);
    let line = line.trim();
    match line.split_once([' ', '\t']) {
        Some((interpreter, argument)) => Some((
            interpreter.to_string(),
            Some(argument.trim().to_string()).filter(|a| !a.is_empty()),
        )),
        None if !line.is_empty() => Some((line.to_string(), None)),
        None => None,
    }
}

fn base_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// `sh` is an ELF program on every machine that runs the tests.
    fn sh() -> PathBuf {
        find_program("sh", Some("/usr/bin:/bin".into())).unwrap()
    }

    #[test]
    fn env_and_its_assignments_are_skipped() {
        let launch = read("env USE_ZEND_DTRACE=1 -u HOME /bin/sh -c true").unwrap();
        assert_eq!(launch.program.as_deref(), Some(Path::new("/bin/sh")));
        assert_eq!(launch.names, ["sh"]);
        assert_eq!(
            launch.assignments,
            [("USE_ZEND_DTRACE".to_string(), "1".to_string())]
        );
        assert!(!launch.clears_environment);
        assert!(read("env -i /bin/sh").unwrap().clears_environment);
    }

    #[test]
    fn a_path_assigned_by_env_is_the_one_searched() {
        let launch = read("env PATH=/usr/bin:/bin sh -c true").unwrap();
        assert_eq!(launch.program, Some(sh()));
        let missing = read("env PATH=/nonexistent sh").unwrap_err().to_string();
        assert_eq!(missing, "cannot run `sh`: not found in PATH");
    }

    /// What a script `name` in `dir` with `text` starts, read by its path.
    fn launched(dir: &Path, name: &str, text: &str) -> Launch {
        read(&script(dir, name, text).to_string_lossy()).unwrap()
    }

    #[test]
    fn shebangs_are_followed_through_env_and_env_s() {
        let dir = tempfile::tempdir().unwrap();
        let launch = launched(dir.path(), "plain", "#!/bin/sh\necho\n");
        assert_eq!(launch.program.as_deref(), Some(Path::new("/bin/sh")));
        assert_eq!(launch.names, ["plain", "sh"]);
        let plain = dir.path().join("plain");
        assert_eq!(launch.files, [plain, PathBuf::from("/bin/sh")]);

        let launch = launched(dir.path(), "via-env", "#!/usr/bin/env sh\necho\n");
        assert_eq!(launch.program, Some(sh()));
        assert_eq!(launch.names, ["via-env", "sh"]);
        let via_env = dir.path().join("via-env");
        assert_eq!(launch.last_script(), Some(("via-env", via_env.as_path())));
        assert_eq!(launch.wrapper(), Some(("via-env", via_env.as_path())));
        assert_eq!(read("/bin/sh -c true").unwrap().last_script(), None);

        let text = "#!/usr/bin/env -S FOO=1 sh -e\necho\n";
        let launch = launched(dir.path(), "split", text);
        assert_eq!(launch.program, Some(sh()));
        assert_eq!(launch.assignments, [("FOO".into(), "1".into())]);
    }

    #[test]
    fn only_a_script_that_a_shell_runs_is_a_wrapper() {
        let dir = tempfile::tempdir().unwrap();
        // `true` runs the script but runs nothing it names: not a wrapper.
        let true_path = find_program("true", Some("/usr/bin:/bin".into())).unwrap();
        let text = format!("#!{}\n", true_path.display());
        let launch = launched(dir.path(), "by-true", &text);
        let script = dir.path().join("by-true");
        assert_eq!(launch.last_script(), Some(("by-true", script.as_path())));
        assert_eq!(launch.wrapper(), None);
        // A file without `#!` runs under /bin/sh: a wrapper.
        let launch = launched(dir.path(), "bare", "exec \"$@\"\n");
        let bare = dir.path().join("bare");
        assert_eq!(launch.wrapper(), Some(("bare", bare.as_path())));
        // A program reached without a script.
        assert_eq!(read("true").unwrap().wrapper(), None);
    }

    #[test]
    fn a_file_without_shebang_runs_under_sh_as_execvp_runs_it() {
        let dir = tempfile::tempdir().unwrap();
        let launch = launched(dir.path(), "bare", "echo hello\n");
        assert_eq!(launch.program.as_deref(), Some(Path::new("/bin/sh")));
    }

    #[test]
    fn a_loop_of_interpreters_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("self");
        script(dir.path(), "self", &format!("#!{}\n", path.display()));
        let launch = read(&path.to_string_lossy()).unwrap();
        assert_eq!(launch.program, None);
        assert_eq!(launch.names.len(), MAX_STEPS);
    }

    #[test]
    fn bad_command_lines_are_errors_not_panics() {
        assert!(read("'unclosed").is_err());
        assert_eq!(read("env").unwrap().program, None);
        assert_eq!(read("env A=1 -S ''").unwrap().program, None);
        let missing = read("/nonexistent/program").unwrap_err().to_string();
        assert_eq!(missing, "cannot run `/nonexistent/program`: no such file");
        assert_eq!(shebang(b"#!"), None);
        assert_eq!(shebang(b"#!  \n"), None);
        assert_eq!(
            shebang(b"#!/usr/bin/env  python3 -u \nx"),
            Some(("/usr/bin/env".into(), Some("python3 -u".into())))
        );
    }
}
