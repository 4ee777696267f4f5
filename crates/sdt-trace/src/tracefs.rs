//! Kernel tracepoints, found through tracefs without mounting it.
//!
//! A tracepoint program is attached by the tracepoint's id, and reads the
//! record the format file describes; both live in tracefs
//! (`events/CATEGORY/NAME/{id,format}`). Many machines do not mount
//! tracefs, and a tracer must not change that for everyone. So where it
//! is not mounted, sdt makes a *detached* mount with the new mount API
//! (`fsopen("tracefs")`, `fsmount`): a file descriptor for a tracefs
//! instance that belongs to no place in any mount namespace, which
//! nobody else sees and which goes away with the descriptor.

use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};

use globset::{Glob, GlobMatcher};
use rustix::fs::{Mode, OFlags};

use crate::Error;
/// One field of a tracepoint's record: the checker's type, so that a
/// format read here is what the checker types `args` by.
pub use sdt_lang::check::TracepointField;

/// A tracepoint with its id and record format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracepoint {
    pub category: String,
    pub name: String,
    /// The perf event id (`events/CATEGORY/NAME/id`).
    pub id: u64,
    pub fields: Vec<TracepointField>,
}

/// A tracefs instance, open.
#[derive(Debug)]
pub struct TraceFs {
    root: OwnedFd,
}

/// Where tracefs is usually mounted.
const MOUNTED: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

impl TraceFs {
    /// Opens tracefs: where it is mounted, else through a detached mount.
    pub fn open() -> Result<TraceFs, Error> {
        for dir in MOUNTED {
            if let Ok(root) = rustix::fs::open(
                dir,
                OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                let probe = rustix::fs::openat(
                    &root,
                    "events",
                    OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                );
                if probe.is_ok() {
                    return Ok(TraceFs { root });
                }
            }
        }
        let detached = || -> io::Result<OwnedFd> {
            use rustix::mount::{
                fsconfig_create, fsmount, fsopen, FsMountFlags, FsOpenFlags, MountAttrFlags,
            };
            let fs = fsopen("tracefs", FsOpenFlags::FSOPEN_CLOEXEC)?;
            fsconfig_create(&fs)?;
            Ok(fsmount(
                &fs,
                FsMountFlags::FSMOUNT_CLOEXEC,
                MountAttrFlags::empty(),
            )?)
        };
        match detached() {
            Ok(root) => Ok(TraceFs { root }),
            Err(e) => Err(Error::Tracefs(format!(
                "tracefs is not mounted, and sdt cannot open a private instance of it ({e}); \
                 tracepoints need CAP_SYS_ADMIN for that, or tracefs mounted at /sys/kernel/tracing"
            ))),
        }
    }

    fn read(&self, path: &str) -> io::Result<String> {
        let fd = rustix::fs::openat(
            &self.root,
            path,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut text = String::new();
        std::fs::File::from(fd).read_to_string(&mut text)?;
        Ok(text)
    }

    fn list(&self, path: &str) -> io::Result<Vec<String>> {
        let fd = rustix::fs::openat(
            &self.root,
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(fd.as_fd())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type() == rustix::fs::FileType::Directory && name != "." && name != ".." {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Every `(category, name)` whose parts match the globs.
    pub fn names(&self, category: &str, name: &str) -> Result<Vec<(String, String)>, Error> {
        let category_glob = matcher(category)?;
        let name_glob = matcher(name)?;
        let categories = self
            .list("events")
            .map_err(|e| Error::Tracefs(format!("cannot list tracepoints: {e}")))?;
        let mut found = Vec::new();
        for c in categories.into_iter().filter(|c| category_glob.is_match(c)) {
            let Ok(names) = self.list(&format!("events/{c}")) else {
                continue;
            };
            found.extend(
                names
                    .into_iter()
                    .filter(|n| name_glob.is_match(n))
                    .map(|n| (c.clone(), n)),
            );
        }
        Ok(found)
    }

    /// The tracepoint `category:name`, with its format.
    pub fn tracepoint(&self, category: &str, name: &str) -> Result<Tracepoint, Error> {
        let dir = format!("events/{category}/{name}");
        let io_error = |what: &str, e: io::Error| {
            Error::Tracefs(format!(
                "cannot read {what} of tracepoint {category}:{name}: {e}"
            ))
        };
        let id = self
            .read(&format!("{dir}/id"))
            .map_err(|e| io_error("the id", e))?
            .trim()
            .parse()
            .map_err(|_| {
                Error::Tracefs(format!("tracepoint {category}:{name} has an unreadable id"))
            })?;
        let format = self
            .read(&format!("{dir}/format"))
            .map_err(|e| io_error("the format", e))?;
        Ok(Tracepoint {
            category: category.to_string(),
            name: name.to_string(),
            id,
            fields: parse_format(&format),
        })
    }
}

fn matcher(glob: &str) -> Result<GlobMatcher, Error> {
    Glob::new(glob)
        .map(|g| g.compile_matcher())
        .map_err(|e| Error::BadSpec {
            spec: glob.to_string(),
            why: e.kind().to_string(),
        })
}

/// Parses the fields of a `format` file:
/// `field:const char * filename;\toffset:24;\tsize:8;\tsigned:0;`.
pub fn parse_format(text: &str) -> Vec<TracepointField> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let decl = line.strip_prefix("field:")?.split(';').next()?.trim();
            let number = |key: &str| -> Option<u64> {
                line.split(';')
                    .map(str::trim)
                    .find_map(|part| part.strip_prefix(key)?.parse().ok())
            };
            let (name, c_type) = split_declaration(decl)?;
            Some(TracepointField {
                name,
                c_type,
                offset: number("offset:")? as u32,
                size: number("size:")? as u32,
                signed: number("signed:").unwrap_or(0) != 0,
            })
        })
        .collect()
}

/// `char comm[16]` → (`comm`, `char[16]`); `const char * filename` →
/// (`filename`, `const char *`).
fn split_declaration(decl: &str) -> Option<(String, String)> {
    let (head, array) = match decl.rfind('[') {
        Some(open) if decl.ends_with(']') => (decl[..open].trim_end(), &decl[open..]),
        _ => (decl, ""),
    };
    let name_start = head
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    let name = &head[name_start..];
    if name.is_empty() {
        return None;
    }
    let c_type = format!("{}{array}", head[..name_start].trim_end());
    Some((name.to_string(), c_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_format_files() {
        let format = "name: sys_enter_openat\nID: 614\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
            \tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;\n\
            \tfield:char comm[16];\toffset:32;\tsize:16;\tsigned:0;\n\
            \tfield:__data_loc char[] name;\toffset:48;\tsize:4;\tsigned:0;\n\n\
            print fmt: \"...\"\n";
        let fields = parse_format(format);
        let got: Vec<(&str, &str, u32, u32, bool)> = fields
            .iter()
            .map(|f| {
                (
                    f.name.as_str(),
                    f.c_type.as_str(),
                    f.offset,
                    f.size,
                    f.signed,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("common_type", "unsigned short", 0, 2, false),
                ("__syscall_nr", "int", 8, 4, true),
                ("filename", "const char *", 24, 8, false),
                ("comm", "char[16]", 32, 16, false),
                ("name", "__data_loc char[]", 48, 4, false),
            ]
        );
    }
}
