//! M4, M6, M7, L3, L4, L13: legacy sessions bound to their owner, connection caps per address and caller, bounded batch answers, the metrics listener.
