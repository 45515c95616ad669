//! stdout protection at the file-descriptor level.
//!
//! In stdio mode stdout belongs to the protocol. Before any plugin is loaded the host keeps a private
//! duplicate of fd 1 for protocol messages and points fd 1 at stderr, so a plugin's `println!`, a C
//! library's `printf` or the host's own stray print all land on stderr and never corrupt the stream.

use std::fs::File;
use std::io;

/// Point fd 1 at stderr and return a handle to the original stdout, for the protocol alone.
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn take_stdout() -> io::Result<File> {
    use std::io::Write as _;
    use std::os::fd::FromRawFd as _;

    // Flush what Rust's own stdout buffer may hold before fd 1 changes meaning.
    let _ = io::stdout().flush();
    // SAFETY: F_DUPFD_CLOEXEC duplicates fd 1 (open for the whole process) into a new descriptor
    // (>= 3) that we own from here on; it is close-on-exec so probe children never inherit it.
    let saved = unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_DUPFD_CLOEXEC, 3) };
    if saved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: dup2 atomically re-points fd 1 at the file behind fd 2; both stay open.
    if unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) } < 0 {
        let err = io::Error::last_os_error();
        // SAFETY: `saved` was created above and is not owned by anything else yet.
        unsafe { libc::close(saved) };
        return Err(err);
    }
    // SAFETY: `saved` is a valid descriptor we exclusively own.
    Ok(unsafe { File::from_raw_fd(saved) })
}

/// Elsewhere the protocol keeps the real stdout (no fd-level redirection).
#[cfg(not(unix))]
pub fn take_stdout() -> io::Result<File> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "stdout redirection is only implemented on unix",
    ))
}
