//! The host's global allocator: mimalloc, called the way the standard library calls the system
//! allocator — its plain entry points (`mi_malloc`, `mi_realloc`, ...) whenever they already
//! return blocks aligned enough, the aligned ones only for the rare type that asks for more.
//!
//! Why mimalloc: a request allocates and frees some fifty small objects, often on different
//! threads, where glibc's per-thread caches overflow into its locked arenas (README, Performance:
//! 3k fewer instructions a stdio call, 8k an HTTP one). Why not the `mimalloc` crate's own
//! `MiMalloc`: it sends every allocation through `mi_malloc_aligned`, whose alignment checks and
//! fallbacks cost about 30 instructions each on mimalloc 3 (callgrind, HTTP `tools/call`: 1.6k
//! of a request's 49k).
//! `no_thp` (Cargo.toml) keeps mimalloc's arenas off transparent huge pages, which would make
//! each thread's first page 2 MB resident.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

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
