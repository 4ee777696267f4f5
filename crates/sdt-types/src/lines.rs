//! From a source line to the address of its code, through DWARF's line
//! tables: what `uprobe:FILE@SOURCE.c:LINE` attaches to.
//!
//! A source file is named as the user remembers it, so a name matches
//! every file of the line tables whose path ends with it, a whole path
//! component at a time (`tests/prog.c` and `prog.c` both match
//! `/src/tests/prog.c`, `og.c` does not); a name that matches two
//! different paths is ambiguous. Rows of files that only matched as
//! included headers of another unit count too, so a line of a header's
//! inline function is found. Of the rows for the line (and column, if
//! given), the lowest address is taken, as bpftrace takes it, among the
//! rows that start a statement (`is_stmt`), where debuggers stop; only a
//! line with no such row falls back to its other rows. Every row's
//! address starts an instruction, but the caller still checks that the
//! address is inside a known function before it puts a probe there.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use gimli::Reader as _;

use crate::{DebugInfo, Error, Reader};

/// A place in a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLine {
    pub file: String,
    pub line: u64,
    /// `None`: any column.
    pub column: Option<u64>,
}

/// The answer to [`DebugInfo::line_address`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineLookup {
    /// The link-time address of the line's code, and the file's path as
    /// the line table has it.
    Found { address: u64, path: PathBuf },
    /// No file of the line tables has that name; close names, best first.
    NoFile { close: Vec<String> },
    /// The name matches files of several paths.
    Ambiguous(Vec<PathBuf>),
    /// The file has no code on that line: the nearest lines before and
    /// after that have some.
    NoCode {
        path: PathBuf,
        before: Option<u64>,
        after: Option<u64>,
    },
}

impl DebugInfo {
    /// The address of the code of `at`.
    pub fn line_address(&self, at: &SourceLine) -> Result<LineLookup, Error> {
        let dwarf = self.full_dwarf()?;
        let wanted = Path::new(&at.file);
        let mut paths: BTreeSet<PathBuf> = BTreeSet::new();
        let mut names: BTreeSet<String> = BTreeSet::new();
        // (is_stmt, address) of the rows on the line, and every line of
        // the matched file with code.
        let mut best: Option<(bool, u64)> = None;
        let mut lines: BTreeSet<u64> = BTreeSet::new();
        let fail = |e: gimli::Error| self.corrupt(0, e);
        let mut headers = dwarf.units();
        while let Some(header) = headers.next().map_err(fail)? {
            let offset = header.offset().0 as u64;
            let fail = |e: gimli::Error| self.corrupt(offset, e);
            let unit = dwarf.unit(header).map_err(fail)?;
            let Some(program) = unit.line_program.clone() else {
                continue;
            };
            // The path of each file entry, and whether it is the one.
            let files: Vec<(PathBuf, bool)> = {
                let header = program.header();
                let mut files = Vec::new();
                for entry in header.file_names() {
                    let path = self.file_path(&dwarf, &unit, header, entry)?;
                    if let Some(name) = path.file_name() {
                        names.insert(name.to_string_lossy().into_owned());
                    }
                    let is = ends_with(&path, wanted);
                    if is {
                        paths.insert(path.clone());
                    }
                    files.push((path, is));
                }
                files
            };
            if !files.iter().any(|(_, is)| *is) {
                continue;
            }
            let base = if program.header().version() >= 5 {
                0
            } else {
                1
            };
            let mut rows = program.rows();
            while let Some((_, row)) = rows.next_row().map_err(fail)? {
                if row.end_sequence() {
                    continue;
                }
                let Some(index) = row.file_index().checked_sub(base) else {
                    continue;
                };
                if !files.get(index as usize).is_some_and(|(_, is)| *is) {
                    continue;
                }
                let Some(line) = row.line() else { continue };
                lines.insert(line.get());
                if line.get() != at.line {
                    continue;
                }
                if let Some(column) = at.column {
                    match row.column() {
                        gimli::ColumnType::Column(c) if c.get() == column => {}
                        _ => continue,
                    }
                }
                let candidate = (row.is_stmt(), row.address());
                best = Some(match best {
                    None => candidate,
                    Some(old) => {
                        // A statement row beats any other, then the lowest.
                        if (candidate.0 && !old.0) || (candidate.0 == old.0 && candidate.1 < old.1)
                        {
                            candidate
                        } else {
                            old
                        }
                    }
                });
            }
        }
        let mut paths: Vec<PathBuf> = paths.into_iter().collect();
        match paths.len() {
            0 => {
                return Ok(LineLookup::NoFile {
                    close: crate::similar(
                        wanted
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default()
                            .as_str(),
                        names.iter(),
                    ),
                })
            }
            1 => {}
            _ => return Ok(LineLookup::Ambiguous(paths)),
        }
        let path = paths.remove(0);
        Ok(match best {
            Some((_, address)) => LineLookup::Found { address, path },
            None => LineLookup::NoCode {
                path,
                before: lines.range(..at.line).next_back().copied(),
                after: lines.range(at.line..).next().copied(),
            },
        })
    }

    /// A file entry's path: its directory and name, under the unit's
    /// compilation directory when relative.
    fn file_path(
        &self,
        dwarf: &gimli::Dwarf<Reader>,
        unit: &gimli::Unit<Reader>,
        header: &gimli::LineProgramHeader<Reader>,
        entry: &gimli::FileEntry<Reader>,
    ) -> Result<PathBuf, Error> {
        let text = |value| -> Result<String, Error> {
            let s = dwarf
                .attr_string(unit, value)
                .map_err(|e| self.corrupt(0, e))?;
            Ok(s.to_string_lossy()
                .map_err(|e| self.corrupt(0, e))?
                .into_owned())
        };
        let mut path = PathBuf::new();
        if let Some(dir) = &unit.comp_dir {
            path.push(
                dir.to_string_lossy()
                    .map_err(|e| self.corrupt(0, e))?
                    .as_ref(),
            );
        }
        if let Some(dir) = entry.directory(header) {
            path.push(text(dir)?);
        }
        path.push(text(entry.path_name())?);
        Ok(path)
    }
}

/// Whether `path` ends with the components of `suffix`.
fn ends_with(path: &Path, suffix: &Path) -> bool {
    let normal = |p: &Path| -> Vec<String> {
        p.components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect()
    };
    let (path, suffix) = (normal(path), normal(suffix));
    !suffix.is_empty() && path.ends_with(&suffix)
}

#[cfg(test)]
mod tests {
    use super::ends_with;
    use std::path::Path;

    #[test]
    fn a_name_matches_whole_trailing_components() {
        let p = Path::new("/src/tests/prog.c");
        assert!(ends_with(p, Path::new("prog.c")));
        assert!(ends_with(p, Path::new("tests/prog.c")));
        assert!(ends_with(p, Path::new("./tests/prog.c")));
        assert!(ends_with(p, Path::new("/src/tests/prog.c")));
        assert!(!ends_with(p, Path::new("og.c")));
        assert!(!ends_with(p, Path::new("other/prog.c")));
        assert!(!ends_with(p, Path::new("")));
    }
}
