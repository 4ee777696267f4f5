//! Programs stored inside ZIP archives (an Android APK's `lib/*.so`):
//! where a member's bytes are in the archive, so that a uprobe can be put
//! on the archive file at the member's offset plus the function's.
//!
//! The kernel maps such a member straight from the archive, which works
//! only for a member stored uncompressed (and page-aligned, which the
//! packager sees to); so only the central directory and one local header
//! need reading, and nothing is inflated. Doing that here, rather than
//! with a ZIP crate, keeps the dependency away from sdt's one binary: the
//! crates that read ZIP files bring decompressors sdt must never run on a
//! traced file anyway. The archive is untrusted input: every offset is
//! checked against its length, and `fuzz/fuzz_targets/zip.rs` feeds this
//! arbitrary bytes.

use std::ops::Range;

/// Why a member cannot be found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZipError {
    #[error("not a ZIP archive (no end of central directory)")]
    NotZip,
    #[error("a ZIP64 archive, which sdt does not read")]
    Zip64,
    #[error("the archive's central directory is cut short or damaged")]
    Damaged,
    #[error("the archive has no member {0}")]
    NoMember(String),
    #[error("the member {0} is compressed; only a member stored as is (zip -0) can be mapped and traced")]
    Compressed(String),
}

const END: u32 = 0x0605_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;
/// The end of central directory record, without its comment.
const END_LEN: usize = 22;
const CENTRAL_LEN: usize = 46;
const LOCAL_LEN: usize = 30;

/// Where the bytes of the member `name` (a path inside the archive, as
/// `archive.zip!/lib/x.so` names it after the `!/`) are in `archive`.
pub fn stored_member(archive: &[u8], name: &str) -> Result<Range<usize>, ZipError> {
    let end = find_end(archive).ok_or(ZipError::NotZip)?;
    let entries = u16_at(archive, end + 10).ok_or(ZipError::Damaged)?;
    let directory = u32_at(archive, end + 16).ok_or(ZipError::Damaged)?;
    if entries == u16::MAX || directory == u32::MAX {
        return Err(ZipError::Zip64);
    }
    let mut at = directory as usize;
    for _ in 0..entries {
        if u32_at(archive, at) != Some(CENTRAL) {
            return Err(ZipError::Damaged);
        }
        let field = |off: usize| u32_at(archive, at + off).ok_or(ZipError::Damaged);
        let half = |off: usize| u16_at(archive, at + off).ok_or(ZipError::Damaged);
        let method = half(10)?;
        let (compressed, size) = (field(20)?, field(24)?);
        let (name_len, extra_len, comment_len) = (half(28)?, half(30)?, half(32)?);
        let local = field(42)?;
        let start = at + CENTRAL_LEN;
        let entry_name = archive
            .get(start..start + usize::from(name_len))
            .ok_or(ZipError::Damaged)?;
        if entry_name == name.as_bytes() {
            if method != 0 || compressed != size {
                return Err(ZipError::Compressed(name.to_string()));
            }
            if compressed == u32::MAX || local == u32::MAX {
                return Err(ZipError::Zip64);
            }
            return member_data(archive, local as usize, size as usize);
        }
        at = start + usize::from(name_len) + usize::from(extra_len) + usize::from(comment_len);
    }
    Err(ZipError::NoMember(name.to_string()))
}

/// The data of a member whose local header is at `local`.
fn member_data(archive: &[u8], local: usize, size: usize) -> Result<Range<usize>, ZipError> {
    if u32_at(archive, local) != Some(LOCAL) {
        return Err(ZipError::Damaged);
    }
    let name_len = u16_at(archive, local + 26).ok_or(ZipError::Damaged)?;
    let extra_len = u16_at(archive, local + 28).ok_or(ZipError::Damaged)?;
    let start = local + LOCAL_LEN + usize::from(name_len) + usize::from(extra_len);
    let end = start.checked_add(size).ok_or(ZipError::Damaged)?;
    if end > archive.len() {
        return Err(ZipError::Damaged);
    }
    Ok(start..end)
}

/// The offset of the end of central directory record: the last one, in
/// the last 64 KiB (its comment may take that much).
fn find_end(archive: &[u8]) -> Option<usize> {
    let last = archive.len().checked_sub(END_LEN)?;
    let first = last.saturating_sub(usize::from(u16::MAX));
    (first..=last)
        .rev()
        .find(|&at| u32_at(archive, at) == Some(END))
}

fn u16_at(data: &[u8], at: usize) -> Option<u16> {
    let bytes = data.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([bytes[0], bytes[1]]))
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An archive of `members` (name, bytes, method), laid out as `zip`
    /// writes one: local headers and data, central directory, end.
    fn archive(members: &[(&str, &[u8], u16)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut central = Vec::new();
        for (name, data, method) in members {
            let local = out.len() as u32;
            out.extend(LOCAL.to_le_bytes());
            out.extend([20, 0, 0, 0]);
            out.extend(method.to_le_bytes());
            out.extend([0; 8]); // time, date, crc
            out.extend((data.len() as u32).to_le_bytes());
            out.extend((data.len() as u32).to_le_bytes());
            out.extend((name.len() as u16).to_le_bytes());
            out.extend(3u16.to_le_bytes());
            out.extend(name.as_bytes());
            out.extend([0; 3]);
            out.extend(*data);
            central.extend(CENTRAL.to_le_bytes());
            central.extend([20, 0, 20, 0, 0, 0]);
            central.extend(method.to_le_bytes());
            central.extend([0; 8]);
            central.extend((data.len() as u32).to_le_bytes());
            central.extend((data.len() as u32).to_le_bytes());
            central.extend((name.len() as u16).to_le_bytes());
            central.extend([0; 12]);
            central.extend(local.to_le_bytes());
            central.extend(name.as_bytes());
        }
        let directory = out.len() as u32;
        out.extend(&central);
        out.extend(END.to_le_bytes());
        out.extend([0; 4]);
        out.extend((members.len() as u16).to_le_bytes());
        out.extend((members.len() as u16).to_le_bytes());
        out.extend((central.len() as u32).to_le_bytes());
        out.extend(directory.to_le_bytes());
        out.extend([0; 2]);
        out
    }

    #[test]
    fn a_stored_member_is_found_where_its_bytes_are() {
        let zip = archive(&[("a.txt", b"hello", 0), ("lib/x.so", b"\x7fELF...", 0)]);
        let range = stored_member(&zip, "lib/x.so").unwrap();
        assert_eq!(&zip[range], b"\x7fELF...");
        assert_eq!(&zip[stored_member(&zip, "a.txt").unwrap()], b"hello");
        assert_eq!(
            stored_member(&zip, "b.txt"),
            Err(ZipError::NoMember("b.txt".into()))
        );
    }

    #[test]
    fn compressed_members_and_other_files_are_refused() {
        let zip = archive(&[("x", b"deflated", 8)]);
        assert_eq!(
            stored_member(&zip, "x"),
            Err(ZipError::Compressed("x".into()))
        );
        assert_eq!(stored_member(b"\x7fELF", "x"), Err(ZipError::NotZip));
        let zip = archive(&[("x", b"data", 0)]);
        // Every prefix is refused without a panic.
        for cut in 0..zip.len() {
            assert!(stored_member(&zip[..cut], "x").is_err());
        }
    }
}
