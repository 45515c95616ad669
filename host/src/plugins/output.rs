//! What strangers write toward the host's log — a worker's output, an upstream child's stderr, an
//! upstream's `notifications/message` outside a call — made safe to log, by one implementation:
//!
//! - each line is **one line** ([`one_line`]): control characters (newlines, carriage returns,
//!   terminal escapes), Unicode line separators and bidirectional overrides are written escaped
//!   (`\n`, `\u{1b}`), so nothing a stranger sends can start a log line of its own;
//! - each line is **bounded**: cut at [`MAX_LINE`] bytes, the log saying how much was dropped (a
//!   stream is read in bounded pieces, [`OutputLines`], whatever it sends);
//! - the lines are **rate-limited** ([`Burst`]): [`BURST`] at once, then [`RATE`] a second. A burst
//!   over the rate is counted, and its **last** [`KEPT`] lines are kept and logged, with the count
//!   of the others, when it ends (the source falls quiet for [`QUIET`], or its stream ends): a
//!   Python traceback keeps its exception.

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

/// The longest line of a stranger's output the host keeps and logs; the rest of a longer line is
/// read and dropped.
pub(crate) const MAX_LINE: usize = 4 * 1024;
/// Lines logged at once before the rate applies.
pub(crate) const BURST: u32 = 200;
/// Lines logged per second after a burst (the others are counted, the last of them kept).
pub(crate) const RATE: u32 = 50;
/// Lines of a burst over the rate kept to be logged when it ends: its last ones.
pub(crate) const KEPT: usize = 20;
/// How long a source must be silent for its burst to have ended.
pub(crate) const QUIET: Duration = Duration::from_secs(1);

/// `text` as one log line of at most `max` bytes: control characters but tab (C0, DEL, C1),
/// the Unicode line and paragraph separators and the bidirectional controls written escaped
/// (`\n`, `\r`, `\u{1b}`); and how many bytes of `text` did not fit.
pub(crate) fn one_line(text: &str, max: usize) -> (String, usize) {
    if text.len() <= max && !text.chars().any(escaped) {
        return (text.to_owned(), 0);
    }
    let mut out = String::with_capacity(text.len().min(max));
    for (at, c) in text.char_indices() {
        let start = out.len();
        if !escaped(c) {
            out.push(c);
        } else if c == '\n' {
            out.push_str("\\n");
        } else if c == '\r' {
            out.push_str("\\r");
        } else {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
        if out.len() > max {
            out.truncate(start);
            return (out, text.len() - at);
        }
    }
    (out, 0)
}

/// Whether `c` is written escaped in a log line.
fn escaped(c: char) -> bool {
    (c.is_control() && c != '\t')
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `text` as one log line of at most [`MAX_LINE`] bytes, saying how many bytes were cut (`more`
/// were cut before it already).
pub(crate) fn log_line(text: &str, more: u64) -> String {
    let (mut line, cut) = one_line(text, MAX_LINE);
    let cut = more.saturating_add(cut as u64);
    if cut > 0 {
        line.push_str(&format!("… (line cut: {cut} more bytes dropped)"));
    }
    line
}

/// What a [`Burst`] says to log.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Logged<'a> {
    /// This line.
    Line(&'a str),
    /// The source went over the rate: the rest of its burst is counted, its last lines kept.
    Over,
    /// This many lines were not logged; the lines that follow are the last ones of the burst.
    Dropped(u64),
}

impl std::fmt::Display for Logged<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Logged::Line(line) => f.write_str(line),
            Logged::Over => write!(
                f,
                "more than {RATE} lines a second: lines past that rate are counted, not \
                 logged, and the last {KEPT} of this burst logged when it ends"
            ),
            Logged::Dropped(n) => write!(f, "{n} lines dropped (more than {RATE} a second)"),
        }
    }
}

/// One source's lines through the rate (a token bucket of [`BURST`] lines refilled at [`RATE`] a
/// second). A line over it is held; of those held, the last [`KEPT`] are kept and the others
/// counted. Held lines are logged in order as the rate allows, and all of them when the burst ends
/// — the source silent for [`QUIET`] ([`Burst::tick`]), or ended ([`Burst::finish`]); the count
/// of the others goes before them, at most once per [`QUIET`] while the burst lasts (about
/// [`RATE`] lines a second and one count), and always when it ends. Nothing is ever reordered or
/// logged twice.
#[derive(Debug)]
pub(crate) struct Burst {
    tokens: f64,
    refilled: Instant,
    /// When the last line came.
    last: Instant,
    held: VecDeque<String>,
    /// Lines held and then let go (older than every line held), not yet counted in the log.
    dropped: u64,
    /// When the count was last logged.
    counted: Option<Instant>,
    /// [`Logged::Over`] was said for this burst.
    over: bool,
}

impl Burst {
    /// A source starting at `now`, with a full bucket.
    pub(crate) fn new(now: Instant) -> Self {
        Burst {
            tokens: f64::from(BURST),
            refilled: now,
            last: now,
            held: VecDeque::new(),
            dropped: 0,
            counted: None,
            over: false,
        }
    }

    /// `line` came at `now`: `log` what is logged now, in order.
    pub(crate) fn push(&mut self, now: Instant, line: String, log: &mut impl FnMut(Logged<'_>)) {
        self.refill(now);
        if now.saturating_duration_since(self.last) >= QUIET {
            self.over = false;
        }
        self.last = now;
        if self.held.is_empty() && self.tokens >= 1.0 {
            self.tokens -= 1.0;
            log(Logged::Line(&line));
            return;
        }
        if !self.over {
            // Said at once; the count of what it lets go comes a while later, or at its end.
            self.over = true;
            self.counted = Some(now);
            log(Logged::Over);
        }
        if self.held.len() == KEPT {
            self.held.pop_front();
            self.dropped += 1;
        }
        self.held.push_back(line);
        self.release(now, log, false);
    }

    /// Time passed (to `now`): log the held lines the rate allows, or every one of them (and the
    /// count of the others) when the source has been quiet for [`QUIET`].
    pub(crate) fn tick(&mut self, now: Instant, log: &mut impl FnMut(Logged<'_>)) {
        self.refill(now);
        let ended = now.saturating_duration_since(self.last) >= QUIET;
        self.release(now, log, ended);
    }

    /// The source ended: log the count of the lines let go and every line held.
    pub(crate) fn finish(&mut self, log: &mut impl FnMut(Logged<'_>)) {
        self.release(self.last, log, true);
    }

    /// When [`Burst::tick`] next has something to log: `None` while nothing is held.
    pub(crate) fn next_tick(&self) -> Option<Instant> {
        if self.held.is_empty() {
            return None;
        }
        let ends = self.last + QUIET;
        let next = if self.dropped > 0 {
            self.counted.map_or(ends, |t| t + QUIET)
        } else {
            // A millisecond past the next token: it is whole by then, rounding whatever.
            let wait = (1.0 - self.tokens).max(0.0) / f64::from(RATE) + 0.001;
            self.refilled + Duration::from_secs_f64(wait)
        };
        Some(next.min(ends))
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(RATE)).min(f64::from(BURST));
        self.refilled = now;
    }

    /// Log held lines while the rate allows (`all`: every one, the burst having ended), after
    /// the count of the lines let go before them: while some are uncounted, the held lines wait
    /// until the count is due (once per [`QUIET`]), so that it always precedes them.
    fn release(&mut self, now: Instant, log: &mut impl FnMut(Logged<'_>), all: bool) {
        if self.dropped > 0 {
            let due = self
                .counted
                .is_none_or(|t| now.saturating_duration_since(t) >= QUIET);
            if !(all || due) {
                return;
            }
            log(Logged::Dropped(self.dropped));
            self.dropped = 0;
            self.counted = Some(now);
        }
        while !self.held.is_empty() && (all || self.tokens >= 1.0) {
            self.tokens = (self.tokens - 1.0).max(0.0);
            if let Some(line) = self.held.pop_front() {
                log(Logged::Line(&line));
            }
        }
        if all {
            self.over = false;
        }
    }
}

/// Read `source` to its end, a line at a time, through a [`Burst`]: `each` sees every line (as
/// logged: escaped and cut), and `log` what is to be logged. Held lines are logged when the
/// source falls quiet too: the read waits for the next line no longer than the burst's next tick.
pub(crate) fn forward<R: io::Read + Readiness>(
    source: R,
    mut each: impl FnMut(&str),
    mut log: impl FnMut(Logged<'_>),
) {
    let mut lines = OutputLines::new(source);
    let mut burst = Burst::new(Instant::now());
    loop {
        let next = match burst.next_tick() {
            Some(until) => lines.next_until(until),
            None => lines.next(),
        };
        match next {
            Next::Line(line) => {
                let text = match line {
                    Line::Whole(text) => log_line(&text, 0),
                    Line::Cut(text, more) => log_line(&text, more),
                };
                each(&text);
                burst.push(Instant::now(), text, &mut log);
            }
            Next::Waiting => burst.tick(Instant::now(), &mut log),
            Next::End => break,
        }
    }
    burst.finish(&mut log);
}

/// One line of a stranger's output.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// The whole line (without its newline).
    Whole(String),
    /// Its first [`MAX_LINE`] bytes, and how many more it had.
    Cut(String, u64),
}

/// What a read of [`OutputLines`] came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// A line.
    Line(Line),
    /// Nothing more came in time (a line begun is kept for the next read).
    Waiting,
    /// The stream ended.
    End,
}

/// A stream whose readiness can be waited for.
pub(crate) trait Readiness {
    /// Wait until it can be read (or has ended, or failed), but not past `until`: whether it can.
    fn wait_until(&self, until: Instant) -> bool;
}

#[cfg(unix)]
impl<T: std::os::fd::AsFd> Readiness for T {
    fn wait_until(&self, until: Instant) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let timeout = Timespec {
                tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [PollFd::new(self, PollFlags::IN)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(n) => return n > 0,
                Err(rustix::io::Errno::INTR) => {}
                // Let the read find out what is wrong.
                Err(_) => return true,
            }
        }
    }
}

#[cfg(not(unix))]
impl<T> Readiness for T {
    fn wait_until(&self, _until: Instant) -> bool {
        true
    }
}

/// Lines from a byte stream, each at most [`MAX_LINE`] bytes held, whatever the stream sends.
pub(crate) struct OutputLines<R> {
    source: R,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The line being read: at most [`MAX_LINE`] bytes of it, and how many more it had.
    line: Vec<u8>,
    dropped: u64,
}

impl<R: io::Read> OutputLines<R> {
    /// Lines read from `source`.
    pub(crate) fn new(source: R) -> Self {
        OutputLines {
            source,
            buf: vec![0; 8 * 1024].into_boxed_slice(),
            start: 0,
            end: 0,
            line: Vec::new(),
            dropped: 0,
        }
    }

    /// The next line; `None` at the end of the stream (a last line without a newline is still
    /// returned).
    pub(crate) fn next_line(&mut self) -> Option<Line> {
        match self.next() {
            Next::Line(line) => Some(line),
            Next::Waiting | Next::End => None,
        }
    }

    /// The next line, waiting for it as long as it takes.
    fn next(&mut self) -> Next {
        self.read(|_| true)
    }

    /// The next line, waiting for more of the stream no longer than `until`.
    fn next_until(&mut self, until: Instant) -> Next
    where
        R: Readiness,
    {
        self.read(|source| source.wait_until(until))
    }

    /// Read up to the next newline; `ready` says whether the stream can be read without waiting
    /// too long.
    fn read(&mut self, mut ready: impl FnMut(&R) -> bool) -> Next {
        loop {
            if self.start == self.end {
                if !ready(&self.source) {
                    return Next::Waiting;
                }
                if !self.fill() {
                    if self.line.is_empty() && self.dropped == 0 {
                        return Next::End;
                    }
                    return Next::Line(self.take());
                }
            }
            let pending = &self.buf[self.start..self.end];
            let newline = memchr::memchr(b'\n', pending);
            let piece = &pending[..newline.unwrap_or(pending.len())];
            let room = MAX_LINE - self.line.len();
            let kept = piece.len().min(room);
            self.line.extend_from_slice(&piece[..kept]);
            self.dropped += (piece.len() - kept) as u64;
            self.start += piece.len();
            if newline.is_some() {
                self.start += 1;
                return Next::Line(self.take());
            }
        }
    }

    /// Refill the buffer; false at the end of the stream (or on an error).
    fn fill(&mut self) -> bool {
        (self.start, self.end) = (0, 0);
        loop {
            match self.source.read(&mut self.buf) {
                Ok(0) => return false,
                Ok(n) => {
                    self.end = n;
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    /// The line read so far, as text.
    fn take(&mut self) -> Line {
        let mut line = std::mem::take(&mut self.line);
        let dropped = std::mem::take(&mut self.dropped);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let text = String::from_utf8_lossy(&line).into_owned();
        if dropped == 0 {
            Line::Whole(text)
        } else {
            Line::Cut(text, dropped)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lines_are_cut_at_the_limit_and_the_stream_goes_on() {
        let mut bytes = vec![b'x'; 3 * MAX_LINE];
        bytes.extend(b"\r\nshort\nlast");
        let mut lines = OutputLines::new(io::Cursor::new(bytes));
        assert_eq!(
            lines.next_line(),
            Some(Line::Cut("x".repeat(MAX_LINE), 2 * MAX_LINE as u64 + 1))
        );
        assert_eq!(lines.next_line(), Some(Line::Whole("short".into())));
        assert_eq!(lines.next_line(), Some(Line::Whole("last".into())));
        assert_eq!(lines.next_line(), None);
    }

    #[test]
    fn a_line_is_escaped_into_one_and_cut_at_its_bound() {
        let forged = "ok\n2026-12-07T00:00:00Z ERROR forged\r\x1b[31m\u{202e}\u{2028}\tend";
        let (line, cut) = one_line(forged, 1000);
        assert_eq!(
            line,
            "ok\\n2026-12-07T00:00:00Z ERROR forged\\r\\u{1b}[31m\\u{202e}\\u{2028}\tend"
        );
        assert_eq!(cut, 0);
        assert_eq!(one_line("plain", 10), ("plain".into(), 0));
        // Cut on a character, the escapes counted in the bound.
        assert_eq!(one_line("ab\ncd", 4), ("ab\\n".into(), 2));
        assert_eq!(one_line("héllo", 2), ("h".into(), 5));
        assert_eq!(
            log_line(&"y".repeat(MAX_LINE + 10), 5),
            format!(
                "{}… (line cut: 15 more bytes dropped)",
                "y".repeat(MAX_LINE)
            )
        );
    }

    /// What a burst logged, as text.
    fn run(burst: &mut Burst, at: Instant, lines: std::ops::Range<u32>, out: &mut Vec<String>) {
        for i in lines {
            burst.push(at, format!("line {i}"), &mut |l| out.push(l.to_string()));
        }
    }

    #[test]
    fn a_burst_over_the_rate_keeps_its_last_lines_and_logs_the_count_when_it_ends() {
        let t0 = Instant::now();
        let mut burst = Burst::new(t0);
        let mut out = Vec::new();
        // 300 lines at once, the last being the exception.
        run(&mut burst, t0, 0..299, &mut out);
        burst.push(t0, "ValueError: the reason".into(), &mut |l| {
            out.push(l.to_string())
        });
        assert_eq!(out.len(), BURST as usize + 1, "{out:?}");
        assert_eq!(out[BURST as usize], Logged::Over.to_string());
        // Nothing more until a tick; the source then falls quiet.
        let next = burst.next_tick().unwrap();
        assert!(next > t0 && next <= t0 + QUIET);
        let mut later = Vec::new();
        burst.tick(t0 + QUIET, &mut |l| later.push(l.to_string()));
        assert_eq!(later.len(), 1 + KEPT, "{later:?}");
        assert_eq!(later[0], Logged::Dropped(100 - KEPT as u64).to_string());
        assert_eq!(later[KEPT - 1], "line 298");
        assert_eq!(later[KEPT], "ValueError: the reason");
        assert_eq!(burst.next_tick(), None);
        // The next burst is told over the rate again.
        let mut again = Vec::new();
        run(&mut burst, t0 + QUIET * 2, 0..200, &mut again);
        assert_eq!(again.last().unwrap(), &Logged::Over.to_string());
    }

    #[test]
    fn held_lines_go_out_in_order_as_the_rate_allows_and_all_of_them_at_the_end() {
        let t0 = Instant::now();
        let mut burst = Burst::new(t0);
        let mut out = Vec::new();
        run(&mut burst, t0, 0..(BURST + 5), &mut out);
        // A tenth of a second later, the rate allows five more: the five held, in order.
        burst.tick(t0 + Duration::from_millis(100), &mut |l| {
            out.push(l.to_string())
        });
        let tail: Vec<_> = out[out.len() - 5..].to_vec();
        let expected: Vec<_> = (BURST..BURST + 5).map(|i| format!("line {i}")).collect();
        assert_eq!(tail, expected);
        assert_eq!(burst.next_tick(), None);
        // A stream that ends logs what it held, with the count.
        let mut flood = Burst::new(t0);
        let mut out = Vec::new();
        run(&mut flood, t0, 0..1000, &mut out);
        flood.finish(&mut |l| out.push(l.to_string()));
        assert_eq!(out.len(), BURST as usize + 1 + 1 + KEPT);
        assert_eq!(out.last().unwrap(), "line 999");
    }

    #[test]
    fn a_sustained_flood_is_logged_at_the_rate_in_order_with_a_count_a_second() {
        let t0 = Instant::now();
        let mut burst = Burst::new(t0);
        let mut out = Vec::new();
        // A thousand lines a second for five seconds, ticked as the reader ticks.
        for i in 0..5000u32 {
            let now = t0 + Duration::from_millis(u64::from(i));
            while let Some(t) = burst.next_tick()
                && t <= now
            {
                burst.tick(t, &mut |l| out.push(l.to_string()));
            }
            burst.push(now, format!("line {i}"), &mut |l| out.push(l.to_string()));
        }
        burst.finish(&mut |l| out.push(l.to_string()));
        let counts = out.iter().filter(|l| l.contains("lines dropped")).count();
        let lines: Vec<u32> = out
            .iter()
            .filter_map(|l| l.strip_prefix("line ")?.parse().ok())
            .collect();
        assert!((4..=6).contains(&counts), "{counts} counts");
        assert!(lines.len() <= 200 + 50 * 5 + KEPT, "{} lines", lines.len());
        assert!(lines.len() >= 200 + 50 * 4, "{} lines", lines.len());
        assert!(lines.windows(2).all(|w| w[0] < w[1]), "out of order");
        assert_eq!(lines.last(), Some(&4999));
        assert_eq!(out.iter().filter(|l| l.starts_with("more than")).count(), 1);
    }

    #[test]
    fn a_quiet_stream_flushes_what_it_held_without_ending() {
        let (mut reader, mut writer) = io::pipe().unwrap();
        let logged = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = std::sync::Arc::clone(&logged);
        let reading = std::thread::spawn(move || {
            forward(
                &mut reader,
                |_| {},
                |l| seen.lock().unwrap().push(l.to_string()),
            );
        });
        let mut burst = String::new();
        for i in 0..5000 {
            burst.push_str(&format!("line {i}\n"));
        }
        burst.push_str("ValueError: \x1b[31mthe reason\n");
        io::Write::write_all(&mut writer, burst.as_bytes()).unwrap();
        // The writer stays open: the exception is logged once the source falls quiet.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !logged
            .lock()
            .unwrap()
            .iter()
            .any(|l| l == "ValueError: \\u{1b}[31mthe reason")
        {
            assert!(Instant::now() < deadline, "{:?}", logged.lock().unwrap());
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            logged
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.ends_with("lines dropped (more than 50 a second)"))
        );
        drop(writer);
        reading.join().unwrap();
    }
}
