//! The host's global allocator: mimalloc, called the way the standard library calls the system
//! allocator — its plain entry points (`mi_malloc`, `mi_realloc`, ...) whenever they already
//! return blocks aligned enough, the aligned ones only for the rare type that asks for more.
//!
//! Why mimalloc: a request allocates and frees some fifty small objects, often on different
//! threads, where glibc's per-thread caches overflow into its locked arenas (docs/performance.md:
//! 3k fewer instructions a stdio call, 8k an HTTP one). Why not the `mimalloc` crate's own
//! `MiMalloc`: it sends every allocation through `mi_malloc_aligned`, whose alignment checks and
//! fallbacks cost about 30 instructions each on mimalloc 3 (callgrind, HTTP `tools/call`: 1.6k
//! of a request's 49k).
//! `no_thp` (Cargo.toml) keeps mimalloc's arenas off transparent huge pages, which would make
//! each thread's first page 2 MB resident; [`configure`] makes its first arena 64 MiB instead of
//! 1 GiB.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{c_int, c_long, c_void};

use libmimalloc_sys as mi;

/// The alignment every mimalloc block of at least this size has (`MI_MAX_ALIGN_SIZE`); smaller
/// blocks are aligned to their size class, which is at least the size itself rounded up to a
/// multiple of 8.
const MIN_ALIGN: usize = 16;

/// Whether a plain allocation of `size` bytes satisfies `align` (the standard library's rule for
/// `malloc`).
#[inline]
fn plain(size: usize, align: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

/// A new block for `layout` from `plain` (size) when it aligns enough, else from `aligned` (size,
/// alignment): mimalloc's plain or zeroing pair. Inlined with the two functions as constants.
///
/// # Safety
///
/// `plain` and `aligned` must be a mimalloc allocation pair; mimalloc accepts any size, and a
/// `Layout`'s alignment is a power of two, as the aligned variants require.
#[allow(unsafe_code)]
#[inline(always)]
unsafe fn fresh(
    layout: Layout,
    plain_fn: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned_fn: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    // SAFETY: the caller passes a mimalloc pair (above).
    unsafe {
        if plain(layout.size(), layout.align()) {
            plain_fn(layout.size()).cast()
        } else {
            aligned_fn(layout.size(), layout.align()).cast()
        }
    }
}

/// mimalloc as the global allocator.
pub struct MiMalloc;

#[allow(unsafe_code)] // A global allocator is unsafe by contract; this is the host's only one.
// SAFETY: every method forwards to the mimalloc function with the same contract, choosing an
// aligned variant whenever the plain one would not guarantee `layout.align()`.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see `fresh`.
        unsafe { fresh(layout, mi::mi_malloc, mi::mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see `fresh`.
        unsafe { fresh(layout, mi::mi_zalloc, mi::mi_zalloc_aligned) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the caller's contract).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout` (the caller's contract).
        unsafe {
            if plain(new_size, layout.align()) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

/// mimalloc 3's `mi_option_arena_reserve` (the `mi_option_t` enum's 24th member; the Rust
/// bindings list mimalloc 2's options only).
const OPTION_ARENA_RESERVE: c_int = 23;

/// mimalloc 3's default for that option on 64-bit targets, in KiB: 1 GiB.
const DEFAULT_ARENA_RESERVE_KIB: c_long = 1024 * 1024;

/// The host's first arena, in KiB.
const ARENA_RESERVE_KIB: c_long = 64 * 1024;

#[allow(unsafe_code)]
unsafe extern "C" {
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// Reserve 64 MiB of address space for mimalloc's first arena instead of 1 GiB. It runs as the
/// executable's constructor, before `main` and before the standard library's start-up, whose
/// first allocation (the main thread's stack-overflow record) reserves the first arena; it
/// allocates nothing itself.
///
/// An arena keeps a bitmap per size class sized to the arena and writes the header of each when
/// it is reserved: for 1 GiB those headers lie on 42 pages (page faults of every start, and
/// 168 kB of idle RSS), for 64 MiB on a few. Later arenas grow (mimalloc doubles their size every
/// eight), so a large heap still takes few. An operator's `MIMALLOC_ARENA_RESERVE` is kept, and
/// nothing is changed when the option does not hold the default this was written for (another
/// mimalloc).
#[allow(unsafe_code)] // a constructor runs before `main`: nothing of std's may be relied on
#[ctor::ctor]
unsafe fn configure() {
    // SAFETY: `getenv` reads the environment, which nothing modifies this early (one thread);
    // the option calls take an option number and a value and are thread-safe.
    unsafe {
        if !libc::getenv(c"MIMALLOC_ARENA_RESERVE".as_ptr()).is_null() {
            return;
        }
        if mi_option_get(OPTION_ARENA_RESERVE) == DEFAULT_ARENA_RESERVE_KIB {
            mi_option_set(OPTION_ARENA_RESERVE, ARENA_RESERVE_KIB);
        }
    }
}
