//! Closing descriptors in another process, so that sdt can exit at once.
//!
//! Closing a uprobe link or a perf event detaches its probes, and the
//! kernel then waits for an RCU grace period before `close` returns: tens
//! of milliseconds each, and longer for a traced process tree. Once the
//! traced process has ended and the output is written, nothing depends on
//! that wait, but the user would still sit through it, because the kernel
//! also waits when a process exits with the descriptors open.
//!
//! So sdt hands them over: it starts a copy of itself (`sdt
//! __release SOCKET`), sends it the descriptors over a unix socket
//! (`SCM_RIGHTS`), closes its own copies, which costs nothing while
//! another reference exists, and exits. The releaser closes them, in the
//! order given, and exits. If anything about the
//! hand-over fails, the caller closes the descriptors itself, as before.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Descriptors per message: the kernel takes at most 253 in one.
const BATCH: usize = 200;

/// How long to wait for the releaser to connect before closing here.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Hands `fds` (to be closed in order) to a new process running
/// `program __release SOCKET`. On failure, gives them back.
///
/// Whoever closes a link last waits for the kernel, so the order matters:
/// the descriptors are sent (the messages in flight hold references of
/// their own), then our copies are closed, then the socket, and the
/// releaser closes its copies only once it sees the socket's end.
pub fn release_elsewhere(program: &Path, fds: Vec<OwnedFd>) -> Result<(), Vec<OwnedFd>> {
    let dir = std::env::temp_dir().join(format!("sdt-release-{}", std::process::id()));
    let connected = connect_releaser(program, &dir);
    let _ = std::fs::remove_file(dir.join("socket"));
    let _ = std::fs::remove_dir(&dir);
    let Ok(stream) = connected else {
        return Err(fds);
    };
    if send(&stream, &fds).is_err() {
        return Err(fds);
    }
    drop(fds);
    drop(stream);
    Ok(())
}

/// Starts `program __release SOCKET` and accepts its connection.
fn connect_releaser(program: &Path, dir: &Path) -> io::Result<UnixStream> {
    std::fs::create_dir(dir)?;
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let socket = dir.join("socket");
    let listener = UnixListener::bind(&socket)?;
    listener.set_nonblocking(true)?;
    Command::new(program)
        .arg("__release")
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    };
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// Sends `fds` in batches, one byte of data carrying each.
fn send(stream: &UnixStream, fds: &[OwnedFd]) -> io::Result<()> {
    for batch in fds.chunks(BATCH) {
        let borrowed: Vec<_> = batch.iter().map(AsFd::as_fd).collect();
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(BATCH))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&borrowed)) {
            return Err(io::Error::other("too many descriptors for one message"));
        }
        sendmsg(
            stream,
            &[IoSlice::new(&[1])],
            &mut control,
            SendFlags::empty(),
        )?;
    }
    Ok(())
}

/// The releaser's side: receives the descriptors [`release_elsewhere`]
/// sends, in order, and returns once the sender has closed its copies.
pub fn receive(socket: &Path) -> io::Result<Vec<OwnedFd>> {
    let stream = UnixStream::connect(socket)?;
    let mut fds = Vec::new();
    loop {
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(BATCH))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut byte = [0u8; 1];
        let got = recvmsg(
            &stream,
            &mut [IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                fds.extend(received);
            }
        }
        if got.bytes == 0 {
            break;
        }
    }
    Ok(fds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_cross_to_the_other_end() {
        let dir = std::env::temp_dir().join(format!("sdt-release-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("socket");
        let listener = UnixListener::bind(&socket).unwrap();
        let receiver = std::thread::spawn({
            let socket = socket.clone();
            move || receive(&socket).unwrap()
        });
        let (stream, _) = listener.accept().unwrap();
        // Stand-ins for links: 300 descriptors, more than one message holds.
        let files: Vec<OwnedFd> = (0..300)
            .map(|_| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
            .collect();
        send(&stream, &files).unwrap();
        // The receiver waits for the end of the stream, which says the
        // sender's copies are closed.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!receiver.is_finished());
        drop(files);
        drop(stream);
        let released = receiver.join().unwrap();
        assert_eq!(released.len(), 300);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
