//! A tiny ELF writer for tests: just enough structure to carry probe notes.
//!
//! The layout is fixed, so tests can compute expected offsets:
//!
//! | what                  | file offset | address    | flags |
//! | --------------------- | ----------- | ---------- | ----- |
//! | headers               | 0           |            |       |
//! | text (filled with nops) | 0x1000    | 0x401000   | R X   |
//! | data (semaphores)     | 0x2000      | 0x603000   | R W   |
//! | `.stapsdt.base`       | in text     | 0x401f00   |       |
//! | notes                 | 0x3000      | not loaded |       |
//! | `.shstrtab`, sections | after notes |            |       |
//!
//! The two segments have different address-to-offset deltas (0x400000 and
//! 0x601000), as real executables do.

#![allow(dead_code)] // each test binary uses a different part

pub const TEXT_OFFSET: u64 = 0x1000;
pub const TEXT_ADDR: u64 = 0x40_1000;
pub const DATA_OFFSET: u64 = 0x2000;
pub const DATA_ADDR: u64 = 0x60_3000;
pub const SEGMENT_SIZE: u64 = 0x1000;
pub const STAPSDT_BASE: u64 = 0x40_1f00;
pub const NOTES_OFFSET: u64 = 0x3000;

pub const EM_386: u16 = 3;
pub const EM_PPC: u16 = 20;
pub const EM_S390: u16 = 22;
pub const EM_X86_64: u16 = 62;
pub const EM_AARCH64: u16 = 183;

/// What to build.
#[derive(Clone, Debug)]
pub struct Elf {
    pub is_64: bool,
    pub big_endian: bool,
    pub machine: u16,
    /// Encoded notes, concatenated (see [`Elf::note`]).
    pub notes: Vec<u8>,
    /// Write section headers (`.note.stapsdt`, `.stapsdt.base`).
    pub sections: bool,
    /// Put the notes in a `PT_NOTE` segment as well.
    pub note_segment: bool,
    /// Where `.stapsdt.base` is now, if the file has that section.
    pub stapsdt_base: Option<u64>,
    /// Byte at every text position (a nop by default).
    pub text_fill: u8,
}

impl Elf {
    pub fn new(is_64: bool, big_endian: bool, machine: u16) -> Elf {
        Elf {
            is_64,
            big_endian,
            machine,
            notes: Vec::new(),
            sections: true,
            note_segment: false,
            stapsdt_base: Some(STAPSDT_BASE),
            text_fill: 0x90,
        }
    }

    pub fn x86_64() -> Elf {
        Elf::new(true, false, EM_X86_64)
    }

    fn word(&self, value: u64) -> Vec<u8> {
        if self.is_64 {
            self.u64(value)
        } else {
            self.u32(value as u32)
        }
    }

    fn u64(&self, v: u64) -> Vec<u8> {
        if self.big_endian {
            v.to_be_bytes().to_vec()
        } else {
            v.to_le_bytes().to_vec()
        }
    }

    fn u32(&self, v: u32) -> Vec<u8> {
        if self.big_endian {
            v.to_be_bytes().to_vec()
        } else {
            v.to_le_bytes().to_vec()
        }
    }

    fn u16(&self, v: u16) -> Vec<u8> {
        if self.big_endian {
            v.to_be_bytes().to_vec()
        } else {
            v.to_le_bytes().to_vec()
        }
    }

    /// Appends a well-formed `stapsdt` note with the current base.
    pub fn probe(
        &mut self,
        pc: u64,
        semaphore: u64,
        provider: &str,
        name: &str,
        args: &str,
    ) -> &mut Elf {
        self.probe_with_base(pc, STAPSDT_BASE, semaphore, provider, name, args)
    }

    /// Appends a `stapsdt` note with an explicit base field.
    pub fn probe_with_base(
        &mut self,
        pc: u64,
        base: u64,
        semaphore: u64,
        provider: &str,
        name: &str,
        args: &str,
    ) -> &mut Elf {
        let mut desc = Vec::new();
        desc.extend(self.word(pc));
        desc.extend(self.word(base));
        desc.extend(self.word(semaphore));
        for s in [provider, name, args] {
            desc.extend_from_slice(s.as_bytes());
            desc.push(0);
        }
        self.note(b"stapsdt\0", 3, &desc)
    }

    /// Appends a note with any name, type and body, correctly framed.
    pub fn note(&mut self, name: &[u8], kind: u32, desc: &[u8]) -> &mut Elf {
        self.raw_note(name.len() as u32, desc.len() as u32, kind, name, desc)
    }

    /// Appends a note whose header sizes may lie about its contents.
    pub fn raw_note(
        &mut self,
        namesz: u32,
        descsz: u32,
        kind: u32,
        name: &[u8],
        desc: &[u8],
    ) -> &mut Elf {
        let mut note = Vec::new();
        note.extend(self.u32(namesz));
        note.extend(self.u32(descsz));
        note.extend(self.u32(kind));
        note.extend_from_slice(name);
        pad4(&mut note);
        note.extend_from_slice(desc);
        pad4(&mut note);
        self.notes.extend(note);
        self
    }

    /// The file.
    pub fn build(&self) -> Vec<u8> {
        let (ehsize, phentsize, shentsize) = if self.is_64 {
            (64, 56, 64)
        } else {
            (52, 32, 40)
        };
        let phnum = 2 + u16::from(self.note_segment);
        let shstrtab = b"\0.note.stapsdt\0.stapsdt.base\0.shstrtab\0";
        let shstrtab_offset = NOTES_OFFSET + self.notes.len() as u64;
        let shoff = (shstrtab_offset + shstrtab.len() as u64 + 7) & !7;
        let sections: Vec<Vec<u8>> = if self.sections {
            let mut s = vec![self.section(0, 0, 0, 0, 0, 0, 0)];
            // name, type, flags, addr, offset, size, align
            s.push(self.section(1, 7, 0, 0, NOTES_OFFSET, self.notes.len() as u64, 4));
            if let Some(base) = self.stapsdt_base {
                s.push(self.section(15, 1, 6, base, TEXT_OFFSET + 0xf00, 1, 1));
            }
            s.push(self.section(29, 3, 0, 0, shstrtab_offset, shstrtab.len() as u64, 1));
            s
        } else {
            Vec::new()
        };

        let mut out = vec![0x7f, b'E', b'L', b'F'];
        out.push(if self.is_64 { 2 } else { 1 });
        out.push(if self.big_endian { 2 } else { 1 });
        out.push(1); // EV_CURRENT
        out.resize(16, 0);
        out.extend(self.u16(2)); // ET_EXEC
        out.extend(self.u16(self.machine));
        out.extend(self.u32(1));
        out.extend(self.word(TEXT_ADDR)); // entry
        out.extend(self.word(u64::from(ehsize))); // phoff
        out.extend(self.word(if self.sections { shoff } else { 0 }));
        out.extend(self.u32(0)); // flags
        out.extend(self.u16(ehsize));
        out.extend(self.u16(phentsize));
        out.extend(self.u16(phnum));
        out.extend(self.u16(shentsize));
        out.extend(self.u16(sections.len() as u16));
        out.extend(self.u16(if self.sections {
            sections.len() as u16 - 1
        } else {
            0
        }));
        assert_eq!(out.len(), usize::from(ehsize));

        out.extend(self.segment(1, 5, TEXT_OFFSET, TEXT_ADDR, SEGMENT_SIZE, 0x1000));
        out.extend(self.segment(1, 6, DATA_OFFSET, DATA_ADDR, SEGMENT_SIZE, 0x1000));
        if self.note_segment {
            out.extend(self.segment(4, 4, NOTES_OFFSET, 0, self.notes.len() as u64, 4));
        }

        out.resize(TEXT_OFFSET as usize, 0);
        out.resize((TEXT_OFFSET + SEGMENT_SIZE) as usize, self.text_fill);
        out.resize(NOTES_OFFSET as usize, 0);
        out.extend_from_slice(&self.notes);
        out.extend_from_slice(shstrtab);
        if self.sections {
            out.resize(shoff as usize, 0);
            for section in sections {
                out.extend(section);
            }
        }
        out
    }

    fn segment(
        &self,
        kind: u32,
        flags: u32,
        offset: u64,
        addr: u64,
        size: u64,
        align: u64,
    ) -> Vec<u8> {
        let mut ph = self.u32(kind);
        if self.is_64 {
            ph.extend(self.u32(flags));
            ph.extend(self.u64(offset));
            ph.extend(self.u64(addr));
            ph.extend(self.u64(addr));
            ph.extend(self.u64(size));
            ph.extend(self.u64(size));
            ph.extend(self.u64(align));
        } else {
            ph.extend(self.u32(offset as u32));
            ph.extend(self.u32(addr as u32));
            ph.extend(self.u32(addr as u32));
            ph.extend(self.u32(size as u32));
            ph.extend(self.u32(size as u32));
            ph.extend(self.u32(flags));
            ph.extend(self.u32(align as u32));
        }
        ph
    }

    #[allow(clippy::too_many_arguments)]
    fn section(
        &self,
        name: u32,
        kind: u32,
        flags: u64,
        addr: u64,
        offset: u64,
        size: u64,
        align: u64,
    ) -> Vec<u8> {
        let mut sh = self.u32(name);
        sh.extend(self.u32(kind));
        sh.extend(self.word(flags));
        sh.extend(self.word(addr));
        sh.extend(self.word(offset));
        sh.extend(self.word(size));
        sh.extend(self.u32(0)); // link
        sh.extend(self.u32(0)); // info
        sh.extend(self.word(align));
        sh.extend(self.word(0)); // entsize
        sh
    }
}

fn pad4(bytes: &mut Vec<u8>) {
    while bytes.len() % 4 != 0 {
        bytes.push(0);
    }
}
