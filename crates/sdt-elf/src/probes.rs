//! Reading `.note.stapsdt` notes out of ELF bytes.
//!
//! Every probe site is one ELF note, owner `stapsdt`, type 3. Its body is
//! three addresses in the file's word size and byte order (the site's `pc`,
//! the link-time address of `.stapsdt.base`, the semaphore or 0), then three
//! NUL-terminated strings: provider, name and argument spec.
//!
//! The parser is zero-copy over borrowed bytes and touches only the file
//! header, the program and section headers and the note data. That matters:
//! `libjvm.so` is 30 MB and its notes are a few kilobytes, so a memory map
//! plus a walk over the notes beats reading the file by orders of magnitude.
//!
//! The addresses in a note are virtual addresses at link time. Two
//! corrections turn them into something a tracer can use:
//!
//! * **Prelink.** Tools like `prelink` move a library after linking. The
//!   note's `base` field recorded where `.stapsdt.base` was at link time; if
//!   the section is somewhere else now, the difference is added to the pc and
//!   the semaphore.
//! * **File offsets.** Uprobes attach at file offsets, and the kernel's
//!   semaphore counter (`ref_ctr_offset`) is a file offset too. Each address
//!   is translated through the `PT_LOAD` segment that contains it. The probe
//!   must be in an executable segment and the semaphore in a writable one;
//!   the two usually have different address-to-offset deltas, so they are
//!   translated separately. Section headers may be stripped; program headers
//!   may not, so this uses segments only.

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::{Endian, Endianness, FileKind};

use crate::args::{args, Args};
use crate::error::ElfError;
use crate::Arch;

/// Every probe in one ELF file, grouped by `provider:name`.
#[derive(Clone, Debug)]
pub struct Probes<'data> {
    /// The file's architecture, which decides the argument grammar.
    pub arch: Arch,
    /// Notes that were malformed and left out; the rest are still listed.
    pub skipped: Vec<SkippedNote>,
    /// The fast path's anchors, one for each semaphore of a probe of the
    /// `sdt` crate built with its `fastpath` feature.
    pub anchors: Vec<Anchor>,
    groups: Vec<Group<'data>>,
    sites: Vec<Site<'data>>,
}

/// A fast-path anchor (a note of owner `sdt`, type 1): a one-byte no-op
/// that never runs, where a uprobe whose reference counter is `semaphore`
/// raises the semaphore without any site trapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Anchor {
    /// The anchor's virtual address, after the prelink correction.
    pub address: u64,
    /// Its offset in the file, in an executable segment.
    pub file_offset: Option<u64>,
    /// The semaphore it raises.
    pub semaphore: Semaphore,
    /// Bit N set when the probe's hits carry a copy of the bytes `argN`
    /// points to (`&CStr`, `&str`, `&[u8]`).
    pub capture: u64,
}

/// One `provider:name` pair and the range of its sites in `Probes::sites`.
#[derive(Clone, Copy, Debug)]
struct Group<'data> {
    provider: &'data str,
    name: &'data str,
    start: usize,
    end: usize,
}

/// One probe: a `provider:name` with all of its sites.
#[derive(Clone, Copy, Debug)]
pub struct Probe<'a> {
    /// The provider, e.g. `python`.
    pub provider: &'a str,
    /// The probe name, e.g. `function__entry`.
    pub name: &'a str,
    /// Every note with this provider and name, in file order. Inlining and
    /// repeated probe macros make one probe appear at many places, each with
    /// its own argument spec and possibly its own semaphore.
    pub sites: &'a [Site<'a>],
}

/// One place where a probe fires: one note.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site<'data> {
    /// The addresses exactly as the note records them.
    pub note: NoteAddresses,
    /// The probe's virtual address after the prelink correction.
    pub address: u64,
    /// Where the probe instruction is in the file: the uprobe attach
    /// offset. `None` if no executable `PT_LOAD` segment holds `address`,
    /// as in relocatable objects or corrupt files.
    pub file_offset: Option<u64>,
    /// The semaphore that gates the probe, if the note names one.
    pub semaphore: Option<Semaphore>,
    /// The argument specs exactly as the note records them, e.g.
    /// `8@%rbx -4@112(%rsp)`; [`Site::args`] parses them.
    pub arg_spec: &'data str,
    /// The architecture whose grammar `arg_spec` follows.
    pub arch: Arch,
}

/// The three addresses of a note, before any correction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NoteAddresses {
    /// Address of the probe instruction at link time.
    pub pc: u64,
    /// Address of `.stapsdt.base` at link time.
    pub base: u64,
    /// Address of the semaphore at link time, 0 if there is none.
    pub semaphore: u64,
}

/// A probe's semaphore: a 16-bit counter the program tests before it
/// computes the probe's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Semaphore {
    /// Virtual address after the prelink correction.
    pub address: u64,
    /// Offset in the file, which the kernel takes as `ref_ctr_offset`.
    /// `None` if no writable `PT_LOAD` segment holds `address`.
    pub file_offset: Option<u64>,
}

/// A note that was left out, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkippedNote {
    /// File offset of the note's header.
    pub offset: u64,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl std::fmt::Display for SkippedNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "skipped the probe note at file offset {:#x}: {}",
            self.offset, self.reason
        )
    }
}

impl<'data> Site<'data> {
    /// Parses the argument specs of this site.
    pub fn args(&self) -> Args<'data> {
        args(self.arch, self.arg_spec)
    }
}

impl<'data> Probes<'data> {
    /// The probes in first-seen order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Probe<'_>> + '_ {
        self.groups.iter().map(|g| Probe {
            provider: g.provider,
            name: g.name,
            sites: &self.sites[g.start..g.end],
        })
    }

    /// Number of distinct probes.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether the file has no probes.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Every site of every probe, grouped by probe.
    pub fn sites(&self) -> &[Site<'data>] {
        &self.sites
    }
}

/// Parses the probes of an ELF file held in memory.
///
/// A file whose headers are broken is an error. A single malformed note is
/// not: it is recorded in [`Probes::skipped`] and the others are kept.
pub fn parse(data: &[u8]) -> Result<Probes<'_>, ElfError> {
    match FileKind::parse(data) {
        Ok(FileKind::Elf32) => parse_elf::<elf::FileHeader32<Endianness>>(data),
        Ok(FileKind::Elf64) => parse_elf::<elf::FileHeader64<Endianness>>(data),
        _ if data.starts_with(&elf::ELFMAG) => Err(ElfError::Corrupt(
            "the ELF identification is truncated or has an unknown class",
        )),
        _ => Err(ElfError::NotElf),
    }
}

/// A `PT_LOAD` segment, reduced to what address translation needs.
#[derive(Clone, Copy)]
struct Load {
    vaddr: u64,
    filesz: u64,
    offset: u64,
    flags: u32,
}

/// Translates a virtual address to a file offset through the first
/// `PT_LOAD` segment with all of `flags` whose file image contains it.
fn file_offset(loads: &[Load], address: u64, flags: u32) -> Option<u64> {
    loads.iter().find_map(|load| {
        let delta = address.checked_sub(load.vaddr)?;
        (load.flags & flags == flags && delta < load.filesz)
            .then(|| load.offset.checked_add(delta))
            .flatten()
    })
}

fn parse_elf<Elf>(data: &[u8]) -> Result<Probes<'_>, ElfError>
where
    Elf: FileHeader<Endian = Endianness>,
{
    let header = Elf::parse(data).map_err(|_| ElfError::Corrupt("the ELF header is truncated"))?;
    let endian = header
        .endian()
        .map_err(|_| ElfError::Corrupt("the ELF header has an unknown byte order"))?;
    let is_64 = header.is_type_64();
    let arch = Arch::from_elf(header.e_machine(endian), is_64, endian.is_big_endian());
    let segments = header
        .program_headers(endian, data)
        .map_err(|_| ElfError::Corrupt("the program headers are malformed or truncated"))?;
    let sections = header
        .sections(endian, data)
        .map_err(|_| ElfError::Corrupt("the section headers are malformed or truncated"))?;

    let loads: Vec<Load> = segments
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| Load {
            vaddr: ph.p_vaddr(endian).into(),
            filesz: ph.p_filesz(endian).into(),
            offset: ph.p_offset(endian).into(),
            flags: ph.p_flags(endian),
        })
        .collect();

    // Where the notes are: the `.note.stapsdt` sections if the file has
    // section headers, else every `PT_NOTE` segment (notes of other owners
    // are passed over below).
    let mut sources: Vec<(u64, u64, u64)> = Vec::new(); // (offset, size, align)
    let mut stapsdt_base = None;
    let mut anchor_sources: Vec<(u64, u64)> = Vec::new(); // (offset, size)
    if sections.is_empty() {
        for ph in segments
            .iter()
            .filter(|ph| ph.p_type(endian) == elf::PT_NOTE)
        {
            sources.push((
                ph.p_offset(endian).into(),
                ph.p_filesz(endian).into(),
                ph.p_align(endian).into(),
            ));
        }
    } else {
        for section in sections.iter() {
            let name = sections.section_name(endian, section).unwrap_or_default();
            if name == b".stapsdt.base" {
                stapsdt_base = Some(section.sh_addr(endian).into());
            } else if name == b".note.stapsdt" && section.sh_type(endian) == elf::SHT_NOTE {
                sources.push((
                    section.sh_offset(endian).into(),
                    section.sh_size(endian).into(),
                    section.sh_addralign(endian).into(),
                ));
            } else if name == b".note.sdt.fast" && section.sh_type(endian) == elf::SHT_NOTE {
                anchor_sources.push((
                    section.sh_offset(endian).into(),
                    section.sh_size(endian).into(),
                ));
            }
        }
    }

    let layout = Layout {
        endian,
        is_64,
        stapsdt_base,
        loads: &loads,
        arch,
    };
    let mut grouper = Grouper::default();
    let mut skipped = Vec::new();
    for (offset, size, align) in sources {
        let bytes = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(start, len)| data.get(start..start.checked_add(len)?));
        let Some(bytes) = bytes else {
            skipped.push(SkippedNote {
                offset,
                reason: "the note section extends past the end of the file",
            });
            continue;
        };
        // Reserve for the most notes the section can hold: the smallest note
        // is a 12-byte header, "stapsdt\0", three addresses and three NULs.
        let smallest = 12 + 8 + if is_64 { 24 } else { 12 } + 4;
        grouper.sites.reserve(bytes.len() / smallest);
        let notes = Notes {
            data: bytes,
            pos: 0,
            align: if align == 8 { 8 } else { 4 },
            endian,
        };
        for note in notes {
            let note_offset = offset + note.offset as u64;
            match note.body {
                Ok(body) if body.is_stapsdt() => match layout.site(body.desc) {
                    Ok((provider, name, site)) => grouper.push(provider, name, site),
                    Err(reason) => skipped.push(SkippedNote {
                        offset: note_offset,
                        reason,
                    }),
                },
                Ok(_) => {}
                Err(reason) => skipped.push(SkippedNote {
                    offset: note_offset,
                    reason,
                }),
            }
        }
    }
    let (groups, sites) = grouper.finish();
    let anchors = anchor_sources
        .into_iter()
        .filter_map(|(offset, size)| {
            let start = usize::try_from(offset).ok()?;
            data.get(start..start.checked_add(usize::try_from(size).ok()?)?)
        })
        .flat_map(|bytes| Notes {
            data: bytes,
            pos: 0,
            align: 4,
            endian,
        })
        .filter_map(|note| note.body.ok())
        .filter(NoteBody::is_sdt_anchor)
        .filter_map(|body| layout.anchor(body.desc))
        .collect();
    Ok(Probes {
        arch,
        skipped,
        anchors,
        groups,
        sites,
    })
}

/// What decoding a note body needs to know about the file.
struct Layout<'a> {
    endian: Endianness,
    is_64: bool,
    stapsdt_base: Option<u64>,
    loads: &'a [Load],
    arch: Arch,
}

impl Layout<'_> {
    /// Decodes the body of a `stapsdt` note into provider, name and site.
    fn site<'data>(
        &self,
        desc: &'data [u8],
    ) -> Result<(&'data str, &'data str, Site<'data>), &'static str> {
        let word = if self.is_64 { 8 } else { 4 };
        if desc.len() < 3 * word {
            return Err("the note is too short for its three addresses");
        }
        let (addresses, strings) = desc.split_at(3 * word);
        let read = |i: usize| read_uint(self.endian, &addresses[i * word..(i + 1) * word]);
        let note = NoteAddresses {
            pc: read(0),
            base: read(1),
            semaphore: read(2),
        };
        let (provider, strings) = c_str(strings).ok_or("the provider is not NUL-terminated")?;
        let (name, strings) = c_str(strings).ok_or("the probe name is not NUL-terminated")?;
        // Notes written without arguments may end right after the name.
        let arg_spec: &[u8] = if strings.is_empty() {
            b""
        } else {
            c_str(strings)
                .ok_or("the argument spec is not NUL-terminated")?
                .0
        };
        let text =
            |bytes| std::str::from_utf8(bytes).map_err(|_| "the note's strings are not UTF-8");
        let (provider, name, arg_spec) = (text(provider)?, text(name)?, text(arg_spec)?);

        // The prelink correction, in the file's address width.
        let mask = if self.is_64 {
            u64::MAX
        } else {
            u64::from(u32::MAX)
        };
        let delta = match self.stapsdt_base {
            Some(base) if note.base != 0 => base.wrapping_sub(note.base),
            _ => 0,
        };
        let address = note.pc.wrapping_add(delta) & mask;
        let semaphore = (note.semaphore != 0).then(|| {
            let address = note.semaphore.wrapping_add(delta) & mask;
            Semaphore {
                address,
                file_offset: file_offset(self.loads, address, elf::PF_W),
            }
        });
        let site = Site {
            note,
            address,
            file_offset: file_offset(self.loads, address, elf::PF_X),
            semaphore,
            arg_spec,
            arch: self.arch,
        };
        Ok((provider, name, site))
    }
}

impl Layout<'_> {
    /// Decodes the body of an `sdt` anchor note: anchor, semaphore,
    /// `.stapsdt.base` and the capture mask, each 8 bytes; `None` for a
    /// malformed one.
    fn anchor(&self, desc: &[u8]) -> Option<Anchor> {
        if !self.is_64 || desc.len() < 32 {
            return None;
        }
        let read = |i: usize| read_uint(self.endian, &desc[i * 8..(i + 1) * 8]);
        let (anchor, semaphore, base, capture) = (read(0), read(1), read(2), read(3));
        let delta = match self.stapsdt_base {
            Some(at) if base != 0 => at.wrapping_sub(base),
            _ => 0,
        };
        let (address, semaphore) = (anchor.wrapping_add(delta), semaphore.wrapping_add(delta));
        Some(Anchor {
            address,
            file_offset: file_offset(self.loads, address, elf::PF_X),
            semaphore: Semaphore {
                address: semaphore,
                file_offset: file_offset(self.loads, semaphore, elf::PF_W),
            },
            capture,
        })
    }
}

/// Reads an unsigned integer of `bytes.len()` bytes (at most 8).
fn read_uint(endian: Endianness, bytes: &[u8]) -> u64 {
    let fold = |acc: u64, &b: &u8| acc << 8 | u64::from(b);
    if endian.is_big_endian() {
        bytes.iter().fold(0, fold)
    } else {
        bytes.iter().rev().fold(0, fold)
    }
}

/// Splits a NUL-terminated string off the front of `bytes`.
fn c_str(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let nul = bytes.iter().position(|&b| b == 0)?;
    Some((&bytes[..nul], &bytes[nul + 1..]))
}

/// The generic ELF note framing: `namesz`, `descsz`, `type`, then the name
/// and the descriptor, each padded to the alignment.
struct Notes<'data> {
    data: &'data [u8],
    pos: usize,
    align: usize,
    endian: Endianness,
}

struct Note<'data> {
    /// Offset of the note header within the section or segment.
    offset: usize,
    body: Result<NoteBody<'data>, &'static str>,
}

struct NoteBody<'data> {
    name: &'data [u8],
    kind: u32,
    desc: &'data [u8],
}

impl NoteBody<'_> {
    fn is_sdt_anchor(&self) -> bool {
        self.kind == 1 && self.name.split(|&b| b == 0).next() == Some(b"sdt")
    }

    fn is_stapsdt(&self) -> bool {
        const NT_STAPSDT: u32 = 3;
        // The name is "stapsdt" plus its NUL, but be lenient about padding.
        self.kind == NT_STAPSDT && self.name.split(|&b| b == 0).next() == Some(b"stapsdt")
    }
}

impl<'data> Iterator for Notes<'data> {
    type Item = Note<'data>;

    fn next(&mut self) -> Option<Note<'data>> {
        let offset = self.pos;
        let rest = self.data.get(offset..)?;
        if rest.is_empty() {
            return None;
        }
        let body = self.frame(rest);
        match &body {
            Ok((_, next)) => self.pos = offset + next,
            // The framing is lost: nothing after this note can be trusted.
            Err(_) => self.pos = self.data.len(),
        }
        Some(Note {
            offset,
            body: body.map(|(body, _)| body),
        })
    }
}

impl<'data> Notes<'data> {
    /// Splits the note at the front of `rest`, returning it and the distance
    /// to the next note.
    fn frame(&self, rest: &'data [u8]) -> Result<(NoteBody<'data>, usize), &'static str> {
        const TRUNCATED: &str = "the note header or body runs past the end of the note section";
        let header = rest.get(..12).ok_or(TRUNCATED)?;
        let word = |i: usize| read_uint(self.endian, &header[i..i + 4]) as usize;
        let (namesz, descsz, kind) = (word(0), word(4), word(8) as u32);
        let align = |n: usize| n.checked_add(self.align - 1).map(|n| n & !(self.align - 1));
        let name = rest
            .get(12..12usize.checked_add(namesz).ok_or(TRUNCATED)?)
            .ok_or(TRUNCATED)?;
        let desc_start = align(12 + namesz).ok_or(TRUNCATED)?;
        let desc_end = desc_start.checked_add(descsz).ok_or(TRUNCATED)?;
        let desc = rest.get(desc_start..desc_end).ok_or(TRUNCATED)?;
        // The last note may omit its trailing padding.
        let next = align(desc_end).ok_or(TRUNCATED)?.min(rest.len());
        Ok((NoteBody { name, kind, desc }, next))
    }
}

/// Groups sites by `provider:name` in first-seen order, in O(n).
#[derive(Default)]
struct Grouper<'data> {
    /// foldhash rather than SipHash: grouping 400,000 notes spent most of
    /// its time hashing. Its seed is still random per process, so a crafted
    /// file cannot pick colliding names in advance.
    index: foldhash::HashMap<(&'data str, &'data str), usize>,
    groups: Vec<Group<'data>>,
    /// Each site with the index of its group.
    sites: Vec<(usize, Site<'data>)>,
}

impl<'data> Grouper<'data> {
    fn push(&mut self, provider: &'data str, name: &'data str, site: Site<'data>) {
        let next = self.groups.len();
        let group = *self.index.entry((provider, name)).or_insert(next);
        if group == next {
            self.groups.push(Group {
                provider,
                name,
                start: 0,
                end: 0,
            });
        }
        self.groups[group].end += 1; // a count until `finish`
        self.sites.push((group, site));
    }

    /// Lays the sites out contiguously per group: a counting sort, stable so
    /// that each probe's sites stay in file order.
    fn finish(mut self) -> (Vec<Group<'data>>, Vec<Site<'data>>) {
        let mut start = 0;
        for group in &mut self.groups {
            let count = group.end;
            group.start = start;
            group.end = start;
            start += count;
        }
        let mut order = vec![0; self.sites.len()];
        for (i, (group, _)) in self.sites.iter().enumerate() {
            let slot = &mut self.groups[*group].end;
            order[*slot] = i;
            *slot += 1;
        }
        let sites = order.into_iter().map(|i| self.sites[i].1).collect();
        (self.groups, sites)
    }
}
