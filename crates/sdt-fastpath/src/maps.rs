//! Where a file's bytes are in a process: the address a semaphore's file
//! offset is mapped at, which the table names it by.

use std::io;

/// The address in process `pid` of byte `offset` of the file with device
/// `dev` and inode `ino`, from `/proc/PID/maps`: in a writable mapping,
/// since a semaphore lives in one. `None` if the process maps no such
/// byte.
pub fn address_of(pid: u32, dev: u64, ino: u64, offset: u64) -> io::Result<Option<u64>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    Ok(maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (range, perms, file_offset, device, inode) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        let (start, end) = range.split_once('-')?;
        let (start, end) = (
            u64::from_str_radix(start, 16).ok()?,
            u64::from_str_radix(end, 16).ok()?,
        );
        let file_offset = u64::from_str_radix(file_offset, 16).ok()?;
        let (maj, min) = device.split_once(':')?;
        let same_file = inode.parse::<u64>().ok()? == ino
            && u32::from_str_radix(maj, 16).ok()? == major
            && u32::from_str_radix(min, 16).ok()? == minor;
        let inside = offset >= file_offset && offset - file_offset < end - start;
        (same_file && inside && perms.as_bytes().get(1) == Some(&b'w'))
            .then(|| start + (offset - file_offset))
    }))
}
