//! `mcp-time`: time-zone aware clock, conversion and duration tools for mcp-host.
//!
//! Backed by [`jiff`] with the IANA time zone database bundled into the plugin, so it works the same
//! on machines without `/usr/share/zoneinfo`.
//!
//! Services and tools:
//!
//! | service | tool | what it does |
//! |---|---|---|
//! | `Clock` | `current_time` | the current time in a zone |
//! | `Clock` | `convert_time` | a time expressed in other zones |
//! | `Clock` | `list_time_zones` | the IANA zone names (filterable) with their current UTC offsets |
//! | `Durations` | `time_between` | the calendar span and exact duration between two times |
//! | `Durations` | `add_duration` | a time plus (or minus) a duration, DST-aware |
//! | `WorldClock` | `world_clock` | the current time in each configured zone (only when configured) |
//!
//! Resources: `time://zones` (every zone with its current offset, JSON) and the template
//! `time://zones/{+zone}` (the current time in one zone; the zone name completes).
//!
//! Times are accepted as RFC 3339 / ISO 8601 with an offset (`2026-11-29T14:00:00+01:00`,
//! `2026-11-29T13:00:00Z`), RFC 9557 with a zone (`2026-11-29T14:00:00+01:00[Europe/Paris]`), a
//! civil date-time interpreted in a given zone (`2026-11-29 14:00`, `2026-11-29T14:00:00`,
//! `2026-11-29`), Unix seconds (`1764421200`), or `now`.
//!
//! # Configuration
//!
//! ```yaml
//! plugins:
//!   mcp-time:
//!     config:
//!       # Optional. Enables the `WorldClock` service and its `world_clock` tool.
//!       world_clock: [Europe/Paris, America/New_York, Asia/Tokyo]
//! ```

use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};
use jiff::{Span, Timestamp, Unit, ZonedDateTime};
use mcp_plugin_sdk::{CompletionRequest, HostApi, export_plugin, service};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most zones `convert_time` converts to in one call.
const MAX_TARGET_ZONES: usize = 50;

/// One instant, expressed in one time zone.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct TimeInfo {
    /// The IANA zone name (e.g. `Europe/Paris`), or a fixed offset such as `+05:30`.
    pub zone: String,
    /// RFC 3339 / ISO 8601 with the UTC offset, e.g. `2026-11-29T14:00:00+01:00`.
    pub iso8601: String,
    /// RFC 9557 with the zone annotation, e.g. `2026-11-29T14:00:00+01:00[Europe/Paris]`.
    pub rfc9557: String,
    /// The wall-clock date and time in the zone, e.g. `2026-11-29 14:00:00`.
    pub local: String,
    /// The day of the week, e.g. `Sunday`.
    pub weekday: String,
    /// The UTC offset in effect, e.g. `+01:00`.
    pub utc_offset: String,
    /// The zone abbreviation in effect, e.g. `CET` (may be numeric like `+0530` for some zones).
    pub abbreviation: String,
    /// Whether daylight saving time is in effect.
    pub is_dst: bool,
    /// Seconds since 1970-01-01T00:00:00Z.
    pub unix_seconds: i64,
}

impl TimeInfo {
    /// Describe `zdt` in its own zone.
    pub fn of(zdt: &ZonedDateTime) -> Self {
        let tz = zdt.time_zone();
        let ts = zdt.timestamp();
        let info = tz.to_offset_info(ts);
        let offset = zdt.offset();
        TimeInfo {
            zone: zone_label(tz, offset),
            iso8601: ts.display_with_offset(offset).to_string(),
            rfc9557: zdt.to_string(),
            local: zdt.datetime().strftime("%Y-%m-%d %H:%M:%S").to_string()
                + &subsec(zdt.subsec_nanosecond()),
            weekday: format!("{:?}", zdt.weekday()),
            utc_offset: fmt_offset(offset),
            abbreviation: info.abbreviation().to_string(),
            is_dst: info.dst().is_dst(),
            unix_seconds: ts.as_second(),
        }
    }
}

fn subsec(nanos: i32) -> String {
    if nanos == 0 {
        String::new()
    } else {
        let s = format!(".{nanos:09}");
        s.trim_end_matches('0').to_owned()
    }
}

/// `+01:00`, `-05:30`, `+00:00` (seconds appended only when non-zero).
fn fmt_offset(offset: Offset) -> String {
    let total = offset.seconds();
    let sign = if total < 0 { '-' } else { '+' };
    let abs = total.unsigned_abs();
    let (h, m, s) = (abs / 3600, abs / 60 % 60, abs % 60);
    if s == 0 {
        format!("{sign}{h:02}:{m:02}")
    } else {
        format!("{sign}{h:02}:{m:02}:{s:02}")
    }
}

fn zone_label(tz: &TimeZone, offset: Offset) -> String {
    match tz.iana_name() {
        Some(name) => name.to_owned(),
        None => fmt_offset(offset),
    }
}

/// Resolve a zone name: an IANA name (case-insensitive), `UTC`, `local`, or a fixed offset `+05:30`.
pub fn parse_zone(name: &str) -> Result<TimeZone, String> {
    let name = name.trim();
    if name.is_empty() {
        return Err(
            "empty time zone: give an IANA name such as \"Europe/Paris\", \"America/New_York\" or \"UTC\""
                .to_owned(),
        );
    }
    if name.starts_with('+') || name.starts_with('-') {
        return parse_fixed_offset(name).map(Offset::to_time_zone);
    }
    if name.eq_ignore_ascii_case("local") || name.eq_ignore_ascii_case("system") {
        return Ok(TimeZone::system());
    }
    if name.eq_ignore_ascii_case("utc") || name.eq_ignore_ascii_case("z") {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|_| unknown_zone_message(name))
}

/// Whether [`parse_zone`] accepts `name`. A name the bundled database knows is accepted without
/// reading the system's database (which lists the whole zoneinfo directory first); any other name
/// (offsets, `local`, a zone only the system knows) goes through `parse_zone` itself.
fn check_zone(name: &str) -> Result<(), String> {
    if jiff::tz::TimeZoneDatabase::bundled()
        .get(name.trim())
        .is_ok()
    {
        return Ok(());
    }
    parse_zone(name).map(drop)
}

fn unknown_zone_message(name: &str) -> String {
    let mut msg = format!(
        "unknown time zone {name:?}: expected an IANA name such as \"Europe/Paris\", \"America/New_York\", \
         \"Asia/Kolkata\" or \"UTC\", or a fixed offset such as \"+05:30\""
    );
    let suggestions = suggest_zones(name);
    if !suggestions.is_empty() {
        msg.push_str("; did you mean ");
        msg.push_str(
            &suggestions
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        msg.push('?');
    } else {
        msg.push_str(" (list_time_zones lists them all)");
    }
    msg
}

/// Zone names close to `name`: same city, or a small edit distance away.
fn suggest_zones(name: &str) -> Vec<String> {
    let wanted = name.to_ascii_lowercase().replace(' ', "_");
    let wanted_city = wanted.rsplit('/').next().unwrap_or(&wanted).to_owned();
    let mut scored: Vec<(usize, String)> = jiff::tz::db()
        .available()
        .filter_map(|n| {
            let full = n.as_str().to_owned();
            let lower = full.to_ascii_lowercase();
            let city = lower.rsplit('/').next().unwrap_or(&lower);
            let d = edit_distance(&wanted_city, city).min(edit_distance(&wanted, &lower));
            let limit = if wanted_city.len() <= 4 { 1 } else { 2 };
            (d <= limit).then_some((d, full))
        })
        .collect();
    scored.sort();
    // An exact city match (e.g. "Paris") beats near misses ("Davis").
    if scored.first().is_some_and(|(d, _)| *d == 0) {
        scored.retain(|(d, _)| *d == 0);
    }
    scored.into_iter().take(5).map(|(_, n)| n).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Parse `+05:30`, `-08`, `+0100`.
fn parse_fixed_offset(s: &str) -> Result<Offset, String> {
    let bad = || {
        format!(
            "invalid UTC offset {s:?}: expected a sign and hours, optionally minutes, e.g. \"+05:30\" or \"-08:00\""
        )
    };
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1, &s[1..]),
        Some(b'-') => (-1, &s[1..]),
        _ => return Err(bad()),
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) || !(digits.len() == 2 || digits.len() == 4) {
        return Err(bad());
    }
    let hours: i32 = digits[..2].parse().map_err(|_| bad())?;
    let minutes: i32 = if digits.len() == 4 {
        digits[2..].parse().map_err(|_| bad())?
    } else {
        0
    };
    if hours > 25 || minutes > 59 {
        return Err(bad());
    }
    Offset::from_seconds(sign * (hours * 3600 + minutes * 60)).map_err(|_| bad())
}

const TIME_FORMATS: &str = "expected RFC 3339 / ISO 8601 with an offset (\"2026-11-29T14:00:00+01:00\" or \
     \"2026-11-29T13:00:00Z\"), RFC 9557 with a zone (\"2026-11-29T14:00:00+01:00[Europe/Paris]\"), a \
     date-time without offset interpreted in the given zone (\"2026-11-29 14:00\" or \"2026-11-29\"), Unix \
     seconds (\"1764421200\"), or \"now\"";

/// How a time string pinned down its instant.
#[derive(Debug)]
enum Parsed {
    /// Complete on its own, in a zone it carried (RFC 9557 annotation).
    Zoned(ZonedDateTime),
    /// An exact instant with the offset it was written with (RFC 3339, `Z`, Unix seconds, `now`).
    Instant(Timestamp, Offset),
    /// A wall-clock time that still needs a zone.
    Civil(DateTime),
}

fn parse_input(input: &str) -> Result<Parsed, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err(format!("empty time: {TIME_FORMATS}"));
    }
    if s.eq_ignore_ascii_case("now") {
        return Ok(Parsed::Instant(now_seconds(), Offset::UTC));
    }
    let digits = s.strip_prefix('-').unwrap_or(s);
    if !digits.is_empty() && digits.len() <= 12 && digits.chars().all(|c| c.is_ascii_digit()) {
        let secs: i64 = s
            .parse()
            .map_err(|_| format!("invalid Unix seconds {s:?}"))?;
        let ts = Timestamp::from_second(secs)
            .map_err(|e| format!("Unix seconds {s} out of range: {e}"))?;
        return Ok(Parsed::Instant(ts, Offset::UTC));
    }
    let pieces = jiff::fmt::temporal::Pieces::parse(s)
        .map_err(|e| format!("cannot parse time {s:?} ({e}): {TIME_FORMATS}"))?;
    if pieces.time_zone_annotation().is_some() {
        let zdt: ZonedDateTime = s
            .parse()
            .map_err(|e| format!("cannot resolve time {s:?}: {e}"))?;
        return Ok(Parsed::Zoned(zdt));
    }
    let dt = pieces.date().to_datetime(pieces.time().unwrap_or_default());
    match pieces.to_numeric_offset() {
        Some(offset) => {
            let ts = offset
                .to_timestamp(dt)
                .map_err(|e| format!("time {s:?} out of range: {e}"))?;
            Ok(Parsed::Instant(ts, offset))
        }
        None => Ok(Parsed::Civil(dt)),
    }
}

fn civil_in(dt: DateTime, tz: &TimeZone) -> Result<ZonedDateTime, String> {
    // `compatible`: a time skipped by a DST gap moves forward, an ambiguous one takes the earlier.
    tz.to_ambiguous_zoned_datetime(dt)
        .compatible()
        .map_err(|e| format!("cannot place {dt} in the zone: {e}"))
}

/// Parse `input` into an instant in a zone.
///
/// `zone` (when given) interprets civil times and is the zone of the result; otherwise the zone the
/// input carried is kept (a fixed offset for RFC 3339), and civil times are read as `fallback`
/// (or rejected when there is none).
pub fn parse_time(
    input: &str,
    zone: Option<&TimeZone>,
    fallback: Option<&TimeZone>,
) -> Result<ZonedDateTime, String> {
    match parse_input(input)? {
        Parsed::Zoned(zdt) => Ok(match zone {
            Some(tz) => zdt.with_time_zone(tz.clone()),
            None => zdt,
        }),
        Parsed::Instant(ts, offset) => Ok(ts.to_zoned_datetime(match zone {
            Some(tz) => tz.clone(),
            None if offset == Offset::UTC => TimeZone::UTC,
            None => offset.to_time_zone(),
        })),
        Parsed::Civil(dt) => match zone.or(fallback) {
            Some(tz) => civil_in(dt, tz),
            None => Err(format!(
                "time {:?} has no UTC offset or zone, so it is ambiguous: pass the zone it is in \
                 (e.g. from_zone = \"Europe/Paris\"), or write it with an offset, e.g. \
                 \"2026-11-29T14:00:00+01:00\"",
                input.trim()
            )),
        },
    }
}

fn now_seconds() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

fn optional_zone(zone: Option<&str>) -> Result<Option<TimeZone>, String> {
    zone.map(parse_zone).transpose()
}

/// A time converted into several zones.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Conversion {
    /// The input instant, in the zone it was given in.
    pub input: TimeInfo,
    /// The same instant in each requested zone, in request order.
    pub converted: Vec<TimeInfo>,
}

/// One entry of the time zone list.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ZoneEntry {
    /// The IANA name, e.g. `Europe/Paris`.
    pub name: String,
    /// The UTC offset in effect now, e.g. `+01:00`.
    pub utc_offset: String,
    /// Whether daylight saving time is in effect now.
    pub is_dst: bool,
}

/// A (possibly filtered) list of time zones.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ZoneList {
    /// How many zones matched the filter.
    pub total_matching: usize,
    /// Whether the list was cut at `limit`.
    pub truncated: bool,
    /// The zones, sorted by name.
    pub zones: Vec<ZoneEntry>,
}

/// Current time, time-zone conversion, and the time zone list.
#[derive(Debug, Default)]
pub struct Clock;

#[service]
impl Clock {
    /// Get the current date and time in a time zone, with its UTC offset, weekday and whether DST is
    /// in effect. Use this whenever you need to know "now" (today's date, the current time somewhere);
    /// never guess it.
    ///
    /// # Arguments
    /// * `zone` - IANA time zone name, e.g. "Europe/Paris", "America/New_York", "Asia/Tokyo", or "UTC"
    ///   (default), or a fixed offset like "+05:30". Names are case-insensitive.
    #[tool(read_only, title = "Current time")]
    pub fn current_time(&self, #[arg(default = "UTC")] zone: String) -> Result<TimeInfo, String> {
        let tz = parse_zone(&zone)?;
        Ok(TimeInfo::of(&now_seconds().to_zoned_datetime(tz)))
    }

    /// Convert a date and time into one or more other time zones ("what time is 14:00 in Paris in
    /// New York?"). DST is handled from the IANA database for the actual date.
    ///
    /// # Arguments
    /// * `time` - The time to convert: with an offset, e.g. "2026-11-29T14:00:00+01:00" or
    ///   "2026-11-29T13:00:00Z"; or a wall-clock time like "2026-11-29 14:00" together with `from_zone`;
    ///   or "now".
    /// * `to_zones` - Target IANA zones, e.g. ["America/New_York", "Asia/Tokyo"] (1 to 50).
    /// * `from_zone` - The zone a wall-clock `time` is in, e.g. "Europe/Paris". Required when `time`
    ///   has no offset; when it has one, it is only used to display the input.
    #[tool(read_only, idempotent, title = "Convert time between zones")]
    pub fn convert_time(
        &self,
        time: String,
        to_zones: Vec<String>,
        from_zone: Option<String>,
    ) -> Result<Conversion, String> {
        if to_zones.is_empty() {
            return Err(
                "to_zones is empty: give at least one zone, e.g. [\"America/New_York\"]".to_owned(),
            );
        }
        if to_zones.len() > MAX_TARGET_ZONES {
            return Err(format!(
                "too many target zones ({}); at most {MAX_TARGET_ZONES} per call",
                to_zones.len()
            ));
        }
        let from = optional_zone(from_zone.as_deref())?;
        let zdt = parse_time(&time, from.as_ref(), None)?;
        let converted = to_zones
            .iter()
            .map(|z| parse_zone(z).map(|tz| TimeInfo::of(&zdt.with_time_zone(tz))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Conversion {
            input: TimeInfo::of(&zdt),
            converted,
        })
    }

    /// List IANA time zone names with their current UTC offsets, optionally filtered. Use it to find
    /// the right zone name for a city or region (e.g. filter "america" or "kolkata").
    ///
    /// # Arguments
    /// * `filter` - Case-insensitive substring to match in the name, e.g. "europe", "new_york",
    ///   "pacific". Omit to list all.
    /// * `limit` - Maximum number of zones returned (default 1000).
    #[tool(read_only, idempotent, title = "List time zones")]
    pub fn list_time_zones(
        &self,
        filter: Option<String>,
        #[arg(default = 1000, min = 1, max = 5000)] limit: u32,
    ) -> ZoneList {
        list_zones(filter.as_deref(), limit as usize, now_seconds())
    }

    /// Every IANA time zone name with its current UTC offset and DST flag, sorted by name, as JSON.
    #[resource(
        uri = "time://zones",
        name = "time-zones",
        title = "Time zones",
        mime_type = "application/json"
    )]
    pub fn zones(&self) -> ZoneList {
        list_zones(None, usize::MAX, now_seconds())
    }

    /// The current time in one IANA time zone (e.g. `time://zones/Europe/Paris`), as JSON.
    #[resource(
        uri = "time://zones/{+zone}",
        name = "time-in-zone",
        title = "Current time in a zone",
        mime_type = "application/json"
    )]
    pub fn zone(&self, #[arg(complete = Self::complete_zone)] zone: String) -> Option<TimeInfo> {
        let tz = TimeZone::get(&zone).ok()?;
        Some(TimeInfo::of(&now_seconds().to_zoned_datetime(tz)))
    }
}

/// The resources of the clock (a second block of the same service would be a second service).
impl Clock {
    /// Zone names starting with what was typed (case-insensitive).
    fn complete_zone(&self, request: &CompletionRequest) -> Vec<String> {
        let mut names: Vec<String> = jiff::tz::db()
            .available()
            .map(|n| n.as_str().to_owned())
            .filter(|n| request.matches(n))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

fn list_zones(filter: Option<&str>, limit: usize, at: Timestamp) -> ZoneList {
    let needle = filter
        .map(|f| f.trim().to_ascii_lowercase().replace(' ', "_"))
        .filter(|f| !f.is_empty());
    let mut names: Vec<String> = jiff::tz::db()
        .available()
        .map(|n| n.as_str().to_owned())
        .filter(|n| {
            needle
                .as_ref()
                .is_none_or(|f| n.to_ascii_lowercase().contains(f.as_str()))
        })
        .collect();
    names.sort();
    names.dedup();
    let total_matching = names.len();
    let zones = names
        .into_iter()
        .take(limit)
        .filter_map(|name| {
            let tz = TimeZone::get(&name).ok()?;
            let info = tz.to_offset_info(at);
            Some(ZoneEntry {
                utc_offset: fmt_offset(info.offset()),
                is_dst: info.dst().is_dst(),
                name,
            })
        })
        .collect();
    ZoneList {
        total_matching,
        truncated: total_matching > limit,
        zones,
    }
}

/// The largest unit a span is expressed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LargestUnit {
    /// years and all smaller units
    Year,
    /// months and smaller
    Month,
    /// weeks and smaller
    Week,
    /// days and smaller
    Day,
    /// hours and smaller
    Hour,
    /// minutes and seconds
    Minute,
    /// seconds only
    Second,
}

impl LargestUnit {
    fn unit(self) -> Unit {
        match self {
            LargestUnit::Year => Unit::Year,
            LargestUnit::Month => Unit::Month,
            LargestUnit::Week => Unit::Week,
            LargestUnit::Day => Unit::Day,
            LargestUnit::Hour => Unit::Hour,
            LargestUnit::Minute => Unit::Minute,
            LargestUnit::Second => Unit::Second,
        }
    }
}

/// A calendar span broken into units.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SpanParts {
    /// Years.
    pub years: i64,
    /// Months.
    pub months: i64,
    /// Weeks.
    pub weeks: i64,
    /// Days.
    pub days: i64,
    /// Hours.
    pub hours: i64,
    /// Minutes.
    pub minutes: i64,
    /// Seconds.
    pub seconds: i64,
}

impl SpanParts {
    fn of(span: &Span) -> Self {
        SpanParts {
            years: span.get_years().into(),
            months: span.get_months().into(),
            weeks: span.get_weeks().into(),
            days: span.get_days().into(),
            hours: span.get_hours().into(),
            minutes: span.get_minutes(),
            seconds: span.get_seconds(),
        }
    }
}

/// The time between two instants.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Between {
    /// The start, as parsed.
    pub start: TimeInfo,
    /// The end, as parsed.
    pub end: TimeInfo,
    /// The calendar span as ISO 8601, e.g. `P1Y2M3DT4H` (negative, `-P...`, when end is before start).
    pub span_iso8601: String,
    /// The calendar span in words, e.g. `1y 2mo 3d 4h`.
    pub span_human: String,
    /// The calendar span by unit (all negative when end is before start).
    pub parts: SpanParts,
    /// The exact elapsed time in seconds (end minus start).
    pub total_seconds: i64,
    /// The exact elapsed time in hours.
    pub total_hours: f64,
    /// The exact elapsed time in (24-hour) days.
    pub total_days: f64,
}

/// A time moved by a duration.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Shifted {
    /// The starting time, as parsed.
    pub input: TimeInfo,
    /// The duration applied, as ISO 8601 (negative when subtracted), e.g. `-P1DT2H`.
    pub duration_iso8601: String,
    /// The resulting time, in the same zone.
    pub result: TimeInfo,
}

/// Calendar-aware duration arithmetic.
#[derive(Debug, Default)]
pub struct Durations;

#[service]
impl Durations {
    /// Compute how long it is between two times: the calendar span (years, months, days, ...) and the
    /// exact elapsed seconds/hours/days. Calendar units follow the zone's calendar, so a span across
    /// a DST change or month end is right. Use "now" for either end to count down to or up from
    /// today.
    ///
    /// # Arguments
    /// * `start` - The start, e.g. "2026-01-15T09:00:00Z", "2026-01-15 09:00" (read in `zone`), or "now".
    /// * `end` - The end, same formats, e.g. "2026-12-25".
    /// * `zone` - IANA zone for times given without an offset and for calendar arithmetic, e.g.
    ///   "Europe/Paris" (default "UTC").
    /// * `largest_unit` - The largest unit of the calendar span (default "year"); e.g. "day" gives
    ///   "P45DT3H" rather than "P1M14DT3H".
    #[tool(read_only, title = "Time between two times")]
    pub fn time_between(
        &self,
        start: String,
        end: String,
        #[arg(default = "UTC")] zone: String,
        #[arg(default = LargestUnit::Year)] largest_unit: LargestUnit,
    ) -> Result<Between, String> {
        let tz = parse_zone(&zone)?;
        let a = parse_time(&start, Some(&tz), None)?;
        let b = parse_time(&end, Some(&tz), None)?;
        between(&a, &b, largest_unit)
    }

    /// Add a duration to a time (or subtract it), e.g. "what is 3 days after 2026-03-28 10:00 in
    /// Paris?" or "90 minutes before now". Calendar units (years, months, days) keep the wall-clock time across DST
    /// changes; hours/minutes/seconds are exact elapsed time.
    ///
    /// # Arguments
    /// * `time` - The starting time, e.g. "2026-03-28T10:00:00+01:00", "2026-03-28 10:00" (read in
    ///   `zone`), or "now".
    /// * `duration` - ISO 8601 like "P1DT2H30M" or "PT90M", or friendly like "1 day 2 hours",
    ///   "2h 30m", "3 weeks", "-1 month".
    /// * `zone` - IANA zone for a `time` without offset and for the result, e.g. "Europe/Paris".
    ///   Default: the zone or offset `time` carries, else "UTC".
    /// * `subtract` - Subtract the duration instead of adding it (default false).
    #[tool(read_only, title = "Add a duration to a time")]
    pub fn add_duration(
        &self,
        time: String,
        duration: String,
        zone: Option<String>,
        #[arg(default = false)] subtract: bool,
    ) -> Result<Shifted, String> {
        let tz = optional_zone(zone.as_deref())?;
        let zdt = parse_time(&time, tz.as_ref(), Some(&TimeZone::UTC))?;
        let mut span = parse_duration(&duration)?;
        if subtract {
            span = span.negate();
        }
        let result = zdt.checked_add(span).map_err(|e| {
            format!("cannot add {span} to {zdt}: {e} (the result is out of the supported range)")
        })?;
        Ok(Shifted {
            input: TimeInfo::of(&zdt),
            duration_iso8601: span.to_string(),
            result: TimeInfo::of(&result),
        })
    }
}

fn parse_duration(s: &str) -> Result<Span, String> {
    s.trim().parse::<Span>().map_err(|e| {
        format!(
            "cannot parse duration {:?} ({e}): expected ISO 8601 like \"P1DT2H30M\" or \"PT90M\", \
             or friendly like \"1 day 2 hours\", \"2h 30m\", \"-3 weeks\"",
            s.trim()
        )
    })
}

fn between(a: &ZonedDateTime, b: &ZonedDateTime, largest: LargestUnit) -> Result<Between, String> {
    let span = a
        .until((largest.unit(), b))
        .map_err(|e| format!("cannot compute the span from {a} to {b}: {e}"))?;
    let exact = a.duration_until(b);
    let secs = exact.as_secs_f64();
    Ok(Between {
        start: TimeInfo::of(a),
        end: TimeInfo::of(b),
        span_iso8601: span.to_string(),
        span_human: format!("{span:#}"),
        parts: SpanParts::of(&span),
        total_seconds: exact.as_secs(),
        total_hours: secs / 3600.0,
        total_days: secs / 86400.0,
    })
}

/// The current time in each configured zone.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WorldClockReading {
    /// The current time in each zone, in configuration order.
    pub zones: Vec<TimeInfo>,
}

/// The current time in a fixed list of zones, from the plugin config key `world_clock`.
#[derive(Debug)]
pub struct WorldClock {
    names: Vec<String>,
    /// The zones, resolved at the first call: the system's time zone database is read then, not
    /// while the host starts (reading it lists the whole zoneinfo directory).
    zones: std::sync::OnceLock<Vec<TimeZone>>,
}

#[service]
impl WorldClock {
    /// Only offered when the config has `world_clock`.
    fn enabled(host: &HostApi) -> bool {
        host.config_value("world_clock").is_some()
    }

    fn new(host: &HostApi) -> Result<Self, String> {
        WorldClock::from_config(host.config_value("world_clock"))
    }

    fn from_config(value: Option<&mcp_plugin_sdk::Value>) -> Result<Self, String> {
        let names: Vec<String> = match value {
            Some(v) => mcp_plugin_sdk::serde_json::from_value(v.clone()).map_err(|_| {
                "config key `world_clock` must be a list of IANA zone names, e.g. [Europe/Paris, America/New_York]"
                    .to_owned()
            })?,
            None => Vec::new(),
        };
        if names.is_empty() {
            return Err("config key `world_clock` is empty: list at least one zone".to_owned());
        }
        for name in &names {
            check_zone(name).map_err(|e| format!("config key `world_clock`: {e}"))?;
        }
        Ok(WorldClock {
            names,
            zones: std::sync::OnceLock::new(),
        })
    }

    /// The configured zones, from the system's database (the bundled one for a name only it
    /// knows; `Etc/Unknown` for a name neither knows any more, which start-up checked).
    fn zones(&self) -> &[TimeZone] {
        self.zones.get_or_init(|| {
            self.names
                .iter()
                .map(|name| {
                    parse_zone(name)
                        .or_else(|_| jiff::tz::TimeZoneDatabase::bundled().get(name.trim()))
                        .unwrap_or_else(|_| TimeZone::unknown())
                })
                .collect()
        })
    }

    /// Show the current time in each of the operator's configured world-clock zones (the team's or
    /// user's usual locations). Use it for "what time is it for everyone?".
    #[tool(read_only, title = "World clock")]
    pub fn world_clock(&self) -> WorldClockReading {
        let now = now_seconds();
        WorldClockReading {
            zones: self
                .zones()
                .iter()
                .map(|tz| TimeInfo::of(&now.to_zoned_datetime(tz.clone())))
                .collect(),
        }
    }
}

export_plugin!(load: on_first_call, services: [Clock, Durations, WorldClock]);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcp_plugin_sdk::json;

    #[test]
    fn the_plugin_serves_its_tools_checked_like_the_host() {
        use mcp_plugin_sdk::testing::{TestHost, TestPlugin};
        let plugin = TestPlugin::new();
        let names: Vec<String> = plugin
            .tools()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "add_duration",
                "convert_time",
                "current_time",
                "list_time_zones",
                "time_between"
            ]
        );
        assert_eq!(
            plugin.problems()["world_clock"],
            "service WorldClock is disabled: enabled() returned false"
        );
        let now = plugin
            .call("current_time", json!({"zone": "Asia/Tokyo"}))
            .unwrap();
        assert!(!now.is_error);
        assert_eq!(now.structured_content.unwrap()["utc_offset"], "+09:00");
        // `zone` defaults to UTC, as the schema advertises.
        let schema = &plugin.tool("current_time").unwrap()["inputSchema"];
        assert_eq!(schema["properties"]["zone"]["default"], "UTC");
        let utc = plugin.call("current_time", json!({})).unwrap();
        assert_eq!(utc.structured_content.unwrap()["zone"], "UTC");
        let bad = plugin
            .call(
                "convert_time",
                json!({"time": "now", "to_zones": "Asia/Tokyo"}),
            )
            .unwrap();
        assert!(bad.is_error);
        assert!(
            bad.text()
                .starts_with("Invalid arguments for tool convert_time: argument `to_zones`"),
            "{}",
            bad.text()
        );

        let configured = TestPlugin::with_host(
            TestHost::new().with_config(json!({"world_clock": ["UTC", "Asia/Kolkata"]})),
        );
        let clock = configured.call("world_clock", json!({})).unwrap();
        assert_eq!(
            clock.structured_content.unwrap()["zones"][1]["utc_offset"],
            "+05:30"
        );
    }

    #[test]
    fn current_time_in_zone() {
        let t = Clock.current_time("europe/paris".into()).unwrap();
        assert_eq!(t.zone, "Europe/Paris");
        assert!(t.utc_offset == "+01:00" || t.utc_offset == "+02:00");
        assert!(t.iso8601.ends_with(&t.utc_offset));
        let utc = Clock.current_time("UTC".into()).unwrap();
        assert_eq!(utc.utc_offset, "+00:00");
        assert!(!utc.is_dst);
    }

    #[test]
    fn unknown_zone_is_a_clear_error_with_suggestions() {
        let e = Clock.current_time("Europe/Pariss".into()).unwrap_err();
        assert!(e.contains("unknown time zone"), "{e}");
        assert!(e.contains("Europe/Paris"), "{e}");
        let e = Clock.current_time("Tokyo".into()).unwrap_err();
        assert!(e.contains("Asia/Tokyo"), "{e}");
        assert!(Clock.current_time("".into()).is_err());
        assert!(Clock.current_time("+99:00".into()).is_err());
    }

    #[test]
    fn fixed_offsets() {
        let t = Clock.current_time("+05:30".into()).unwrap();
        assert_eq!(t.utc_offset, "+05:30");
        assert_eq!(parse_fixed_offset("-0800").unwrap().seconds(), -8 * 3600);
        assert!(parse_fixed_offset("+5").is_err());
        assert!(parse_fixed_offset("+ab:cd").is_err());
    }

    #[test]
    fn convert_civil_time_between_zones() {
        let c = Clock
            .convert_time(
                "2026-11-29 14:00".into(),
                vec!["America/New_York".into(), "Asia/Tokyo".into()],
                Some("Europe/Paris".into()),
            )
            .unwrap();
        assert_eq!(c.input.iso8601, "2026-11-29T14:00:00+01:00");
        assert_eq!(c.input.weekday, "Sunday");
        assert_eq!(c.converted[0].iso8601, "2026-11-29T08:00:00-05:00");
        assert_eq!(c.converted[0].abbreviation, "EST");
        assert_eq!(c.converted[1].local, "2026-11-29 22:00:00");
        assert_eq!(c.input.unix_seconds, c.converted[1].unix_seconds);
    }

    #[test]
    fn convert_with_offsets_and_dst() {
        let c = Clock
            .convert_time(
                "2026-07-01T12:00:00Z".into(),
                vec!["Europe/London".into()],
                None,
            )
            .unwrap();
        assert_eq!(c.input.zone, "UTC");
        assert_eq!(c.converted[0].utc_offset, "+01:00");
        assert!(c.converted[0].is_dst);
        assert_eq!(c.converted[0].abbreviation, "BST");
        let c = Clock
            .convert_time(
                "2026-07-01T12:00:00+02:00[Europe/Paris]".into(),
                vec!["UTC".into()],
                None,
            )
            .unwrap();
        assert_eq!(c.input.zone, "Europe/Paris");
        assert_eq!(c.converted[0].local, "2026-07-01 10:00:00");
        let c = Clock
            .convert_time("1764421200".into(), vec!["UTC".into()], None)
            .unwrap();
        assert_eq!(c.converted[0].iso8601, "2025-11-29T13:00:00+00:00");
    }

    #[test]
    fn convert_errors() {
        let e = Clock
            .convert_time("2026-11-29 14:00".into(), vec!["UTC".into()], None)
            .unwrap_err();
        assert!(e.contains("from_zone"), "{e}");
        let e = Clock
            .convert_time("next tuesday".into(), vec!["UTC".into()], None)
            .unwrap_err();
        assert!(e.contains("2026-11-29T14:00:00+01:00"), "{e}");
        assert!(Clock.convert_time("now".into(), vec![], None).is_err());
        assert!(
            Clock
                .convert_time("now".into(), vec!["Mars/Olympus".into()], None)
                .is_err()
        );
        assert!(
            Clock
                .convert_time(
                    "2026-13-45 99:00".into(),
                    vec!["UTC".into()],
                    Some("UTC".into())
                )
                .is_err()
        );
        assert!(
            Clock
                .convert_time("99999999999".into(), vec!["UTC".into()], None)
                .is_ok()
        );
        assert!(
            Clock
                .convert_time("999999999999".into(), vec!["UTC".into()], None)
                .is_err()
        );
    }

    #[test]
    fn list_zones_filters() {
        let l = Clock.list_time_zones(Some("new_york".into()), 10);
        assert!(l.zones.iter().any(|z| z.name == "America/New_York"));
        let all = Clock.list_time_zones(None, 5);
        assert_eq!(all.zones.len(), 5);
        assert!(all.truncated);
        assert!(all.total_matching > 300);
        let none = Clock.list_time_zones(Some("zzzz".into()), 10);
        assert_eq!(none.total_matching, 0);
    }

    #[test]
    fn between_calendar_and_exact() {
        let b = Durations
            .time_between(
                "2026-01-15 09:00".into(),
                "2027-03-16 10:30".into(),
                "Europe/Paris".into(),
                LargestUnit::Year,
            )
            .unwrap();
        assert_eq!(b.span_iso8601, "P1Y2M1DT1H30M");
        assert_eq!(b.parts.years, 1);
        assert_eq!(b.parts.minutes, 30);
        // Across the spring-forward change: 1 calendar day is 23 hours.
        let b = Durations
            .time_between(
                "2026-03-28 12:00".into(),
                "2026-03-29 12:00".into(),
                "Europe/Paris".into(),
                LargestUnit::Day,
            )
            .unwrap();
        assert_eq!(b.parts.days, 1);
        assert_eq!(b.total_seconds, 23 * 3600);
        let b = Durations
            .time_between(
                "2026-01-02T00:00:00Z".into(),
                "2026-01-01T00:00:00Z".into(),
                "UTC".into(),
                LargestUnit::Hour,
            )
            .unwrap();
        assert_eq!(b.parts.hours, -24);
        assert_eq!(b.total_days, -1.0);
        assert!(b.span_iso8601.starts_with('-'));
    }

    #[test]
    fn add_duration_keeps_wall_clock_across_dst() {
        let s = Durations
            .add_duration(
                "2026-03-28T10:00:00+01:00[Europe/Paris]".into(),
                "1 day".into(),
                None,
                false,
            )
            .unwrap();
        assert_eq!(s.result.iso8601, "2026-03-29T10:00:00+02:00");
        let s = Durations
            .add_duration(
                "2026-03-28 10:00".into(),
                "PT24H".into(),
                Some("Europe/Paris".into()),
                false,
            )
            .unwrap();
        assert_eq!(s.result.iso8601, "2026-03-29T11:00:00+02:00");
        let s = Durations
            .add_duration(
                "2026-03-31T00:00:00+05:30".into(),
                "1 month".into(),
                None,
                true,
            )
            .unwrap();
        assert_eq!(s.result.iso8601, "2026-02-28T00:00:00+05:30");
        assert_eq!(s.duration_iso8601, "-P1M");
        let s = Durations
            .add_duration("2026-01-01".into(), "2h 30m".into(), None, false)
            .unwrap();
        assert_eq!(s.result.iso8601, "2026-01-01T02:30:00+00:00");
    }

    #[test]
    fn add_duration_errors() {
        let e = Durations
            .add_duration("now".into(), "soon".into(), None, false)
            .unwrap_err();
        assert!(e.contains("P1DT2H30M"), "{e}");
        assert!(
            Durations
                .add_duration("now".into(), "P20000Y".into(), None, false)
                .is_err()
        );
    }

    #[test]
    fn world_clock_from_config() {
        assert!(WorldClock::from_config(None).is_err());
        assert!(WorldClock::from_config(Some(&json!([]))).is_err());
        assert!(WorldClock::from_config(Some(&json!("Europe/Paris"))).is_err());
        let e =
            WorldClock::from_config(Some(&json!(["Europe/Paris", "Nowhere/Land"]))).unwrap_err();
        assert!(e.contains("Nowhere/Land"), "{e}");
        let wc = WorldClock::from_config(Some(&json!(["Europe/Paris", "Asia/Tokyo"]))).unwrap();
        let r = wc.world_clock();
        assert_eq!(r.zones.len(), 2);
        assert_eq!(r.zones[1].zone, "Asia/Tokyo");
        assert_eq!(r.zones[0].unix_seconds, r.zones[1].unix_seconds);
    }

    #[test]
    fn subsecond_precision_is_kept() {
        let c = Clock
            .convert_time("2026-01-01T00:00:00.250Z".into(), vec!["UTC".into()], None)
            .unwrap();
        assert_eq!(c.converted[0].local, "2026-01-01 00:00:00.25");
    }
}
