//! Flame graphs: every map keyed by a user stack as an interactive SVG
//! (zoom on click, search, a tooltip per frame), written when the run
//! ends.
//!
//! The stacks are the ones `-f folded` prints ([`folded::fold`]: root
//! first, demangled, the object's name where the symbol is unknown, the
//! other parts of the key as root frames), so a flame graph and the
//! folded lines always agree. Drawing is inferno's, the maintained Rust
//! port of Brendan Gregg's FlameGraph (licensed CDDL-1.0, see the
//! README): laying out frames, fitting their names and the page's
//! script are not worth redoing.
//!
//! A map printed several times (`print(@m)` in an interval, then at the
//! end) is drawn as printed last. With one stack-keyed map, the picture
//! goes to the file given; with several, one file per map, named after
//! it: `flame.svg` becomes `flame@stacks.svg` for `@stacks`, `flame@.svg`
//! for `@`. Where each went is said on the notes writer (standard
//! error), as is a run that printed no stack-keyed map.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::folded;
use crate::model::MapKind;
use crate::{Event, Sink};

/// A stack-keyed map: its name, what its values count, and its folded
/// stacks.
type Stacks = (String, String, Vec<(String, i128)>);

/// Writes the stack-keyed maps as SVG flame graphs at the end of a run.
pub struct Flamegraph<'w> {
    path: PathBuf,
    /// What a frame's width counts, when the caller knows better than
    /// the map's kind (`calls`, `ns`).
    count_name: Option<String>,
    /// The title of a picture without a map behind it.
    title: Option<String>,
    /// Each stack-keyed map as printed last, in the order first printed.
    maps: Vec<Stacks>,
    notes: Box<dyn Write + 'w>,
    error: Option<io::Error>,
    finished: bool,
}

impl<'w> Flamegraph<'w> {
    /// A flame graph of the run's stack-keyed maps, to `path`; what it
    /// has to say goes to `notes`.
    pub fn new(path: &Path, notes: Box<dyn Write + 'w>) -> Flamegraph<'w> {
        Flamegraph {
            path: path.to_path_buf(),
            count_name: None,
            title: None,
            maps: Vec::new(),
            notes,
            error: None,
            finished: false,
        }
    }

    /// Names what the widths count (default: from the map's kind).
    pub fn counting(mut self, count_name: &str) -> Flamegraph<'w> {
        self.count_name = Some(count_name.to_string());
        self
    }

    /// Titles the picture (default: the map's name).
    pub fn titled(mut self, title: &str) -> Flamegraph<'w> {
        self.title = Some(title.to_string());
        self
    }

    /// The file for map `name`: the path given, or with several maps,
    /// the path with the map's name before its extension.
    fn file_for(&self, name: &str, several: bool) -> PathBuf {
        if !several {
            return self.path.clone();
        }
        let stem = self
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let file = match self.path.extension() {
            Some(ext) => format!("{stem}{name}.{}", ext.to_string_lossy()),
            None => format!("{stem}{name}"),
        };
        self.path.with_file_name(file)
    }

    fn draw(&mut self) {
        let maps = std::mem::take(&mut self.maps);
        if maps.is_empty() {
            let _ = writeln!(
                self.notes,
                "sdt: --flamegraph: no map keyed by ustack was printed; {} not written",
                self.path.display()
            );
        }
        for (name, count_name, stacks) in &maps {
            let path = self.file_for(name, maps.len() > 1);
            let lines: Vec<String> = stacks
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(stack, n)| format!("{stack} {n}"))
                .collect();
            if lines.is_empty() {
                let _ = writeln!(
                    self.notes,
                    "sdt: --flamegraph: {name} has no stack with a count above 0; {} not written",
                    path.display()
                );
                continue;
            }
            let mut options = inferno::flamegraph::Options::default();
            options.title = self.title.clone().unwrap_or_else(|| name.clone());
            options.count_name = self.count_name.clone().unwrap_or(count_name.clone());
            // Colours from the names, so that a run draws as the last did.
            options.hash = true;
            let written = File::create(&path).and_then(|file| {
                let mut out = BufWriter::new(file);
                let lines = lines.iter().map(String::as_str);
                inferno::flamegraph::from_lines(&mut options, lines, &mut out)?;
                out.flush()
            });
            match written {
                Ok(()) => {
                    let _ = writeln!(
                        self.notes,
                        "sdt: flame graph of {name} written to {}",
                        path.display()
                    );
                }
                Err(e) if self.error.is_none() => {
                    let at = format!("{}: {e}", path.display());
                    self.error = Some(io::Error::new(e.kind(), at));
                }
                Err(_) => {}
            }
        }
        let _ = self.notes.flush();
    }
}

/// What the values of a map of `kind` count, for a frame's tooltip.
fn counted(kind: MapKind) -> &'static str {
    match kind {
        MapKind::Count => "hits",
        MapKind::Hist | MapKind::Lhist => "values",
        MapKind::Sum => "total",
        _ => "value",
    }
}

impl Sink for Flamegraph<'_> {
    /// Keeps the maps keyed by stacks (the last print of each), and a
    /// tool's own stacks, drawn like a map's.
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Map(map) => {
                let Some(stacks) = folded::fold(map) else {
                    return;
                };
                let entry = (map.name.clone(), counted(map.kind).to_string(), stacks);
                match self.maps.iter_mut().find(|m| m.0 == map.name) {
                    Some(kept) => *kept = entry,
                    None => self.maps.push(entry),
                }
            }
            Event::Stacks {
                name,
                counted,
                stacks,
            } => self
                .maps
                .push((name.to_string(), counted.to_string(), stacks.to_vec())),
            _ => {}
        }
    }

    fn finish(&mut self) {
        if !std::mem::replace(&mut self.finished, true) {
            self.draw();
        }
    }

    fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Datum, Frame, MapPrint, MapRow, MapValue, Stack, StackStyle};

    fn stack(names: &[&str]) -> Datum {
        Datum::Stack(Stack {
            frames: names
                .iter()
                .rev()
                .enumerate()
                .map(|(i, n)| Frame {
                    addr: 0x1000 + i as u64,
                    symbol: Some((n.to_string(), 0)),
                    ..Frame::default()
                })
                .collect(),
            style: StackStyle::Bpftrace,
            kernel: false,
        })
    }

    fn map(name: &str, rows: &[(&[&str], i128)]) -> MapPrint {
        MapPrint {
            name: name.into(),
            kind: MapKind::Count,
            keyed: true,
            rows: rows
                .iter()
                .map(|(frames, n)| MapRow {
                    key: vec![stack(frames)],
                    value: MapValue::Number(*n),
                })
                .collect(),
            div: 1,
        }
    }

    /// The `<title>` texts of an SVG: a frame's name and its count.
    fn titles(svg: &str) -> Vec<String> {
        svg.split("<title>")
            .skip(1)
            .filter_map(|t| Some(t.split_once("</title>")?.0.to_string()))
            .collect()
    }

    #[test]
    fn one_map_one_file_with_every_frame_and_its_count() {
        let dir = std::env::temp_dir().join(format!("sdt-flame-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("one.svg");
        let mut notes = Vec::new();
        {
            let mut sink = Flamegraph::new(&path, Box::new(&mut notes));
            // Not keyed by a stack: not drawn.
            sink.event(Event::Map(&MapPrint {
                rows: vec![MapRow {
                    key: vec![Datum::int(1)],
                    value: MapValue::Number(4),
                }],
                ..map("@n", &[])
            }));
            sink.event(Event::Map(&map(
                "@s",
                &[(&["main", "a", "leaf"], 3), (&["main", "b", "leaf"], 5)],
            )));
            // Printed again at the end: this print is the one drawn.
            sink.event(Event::Map(&map(
                "@s",
                &[(&["main", "a", "leaf"], 6), (&["main", "b", "leaf"], 2)],
            )));
            sink.finish();
            assert!(sink.error().is_none());
        }
        let svg = std::fs::read_to_string(&path).unwrap();
        let titles = titles(&svg);
        assert!(
            titles.contains(&"main (8 hits, 100.00%)".to_string()),
            "{titles:?}"
        );
        assert!(
            titles.contains(&"a (6 hits, 75.00%)".to_string()),
            "{titles:?}"
        );
        assert!(
            titles.contains(&"b (2 hits, 25.00%)".to_string()),
            "{titles:?}"
        );
        assert!(svg.contains("function search("), "the page can search");
        assert_eq!(
            String::from_utf8(notes).unwrap(),
            format!("sdt: flame graph of @s written to {}\n", path.display())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn several_maps_one_file_each_named_after_the_map() {
        let dir = std::env::temp_dir().join(format!("sdt-flames-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("flame.svg");
        let mut sink = Flamegraph::new(&path, Box::new(io::sink()));
        sink.event(Event::Map(&map("@", &[(&["main", "a"], 1)])));
        sink.event(Event::Map(&map("@other", &[(&["main", "b"], 2)])));
        sink.finish();
        assert!(sink.error().is_none());
        let a = std::fs::read_to_string(dir.join("flame@.svg")).unwrap();
        let b = std::fs::read_to_string(dir.join("flame@other.svg")).unwrap();
        assert!(titles(&a).contains(&"a (1 hits, 100.00%)".to_string()));
        assert!(titles(&b).contains(&"b (2 hits, 100.00%)".to_string()));
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_stacks_no_file_and_it_is_said() {
        let path = std::env::temp_dir().join(format!("sdt-none-{}.svg", std::process::id()));
        let mut notes = Vec::new();
        {
            let mut sink = Flamegraph::new(&path, Box::new(&mut notes));
            sink.event(Event::Value(&Datum::int(1)));
            sink.finish();
        }
        assert!(!path.exists());
        assert!(String::from_utf8(notes)
            .unwrap()
            .contains("no map keyed by ustack was printed"));
    }
}
